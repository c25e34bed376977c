#include "transport/collectives.h"

#include <cstring>

#include "transport/algorithms/algorithms.h"
#include "transport/error.h"
#include "transport/hierarchy/host_node_steps.h"
#include "transport/hierarchy/planner.h"
#include "transport/hierarchy/schedules.h"
#include "transport/log.h"
#include "transport/reduce.h"
#include "transport/settings.h"
#include "transport/shm/collectives.h"

namespace hier::transport {
namespace {

void checkReduction(ReduceOp op, DataType dtype) {
  if (auto reason = unsupportedReason(op, dtype)) throw Error(ErrorKind::InvalidUsage, *reason);
}

void checkRoot(const Collective& c, int root) {
  if (root < 0 || root >= c.size()) {
    throw Error(ErrorKind::InvalidUsage, "root rank " + std::to_string(root) + " is outside the group's ranks 0.." +
                                             std::to_string(c.size() - 1));
  }
}

void checkParts(const Collective& c, const std::vector<Buffer>& parts, const char* what) {
  if (parts.size() != size_t(c.size())) {
    throw Error(ErrorKind::InvalidUsage, std::string("expected one ") + what + " per rank (" +
                                             std::to_string(c.size()) + "), got " + std::to_string(parts.size()));
  }
}

size_t totalBytes(const std::vector<Buffer>& parts) {
  size_t total = 0;
  for (auto& part : parts) total += part.bytes();
  return total;
}

// HIER_DEBUG=DEBUG: every collective's algorithm; HIER_DEBUG=INFO: the first time a communicator uses each.
void trace(Collective& c, const char* op, const char* algorithm, size_t bytes) {
  const std::string what = std::string(op) + ": " + algorithm;
  if (logEnabled(LogLevel::Debug)) {
    log(LogLevel::Debug, "'" + c.group().name() + "' " + what + ", " + std::to_string(bytes) + " bytes");
  } else if (logEnabled(LogLevel::Info) && c.group().firstUse(what)) {
    log(LogLevel::Info, "'" + c.group().name() + "' " + what + " (first used at " + std::to_string(bytes) +
                            " bytes)");
  }
}

// How the group's ranks spread over hosts; learned once per group, by all of them.
const hierarchy::Topology& topologyOf(Collective& c) { return c.group().topology(c.deadline()); }

// The group's shared-memory arena when this collective should run through it.
shm::NodeArena* arenaFor(Collective& c, size_t bytes) {
  if (c.size() == 1 || bytes < settings().shmMinBytes) return nullptr;
  return c.group().arena(c.deadline());
}

}  // namespace

AllreduceAlgorithm chooseAllreduce(size_t bytes, size_t count, int size) {
  if (size == 1) return AllreduceAlgorithm::Local;
  // The ring needs at least one element per rank to split the buffer into blocks.
  if (bytes < settings().allreduceRingMinBytes || count < size_t(size)) return AllreduceAlgorithm::RecursiveDoubling;
  return AllreduceAlgorithm::Ring;
}

const char* toString(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::Local: return "local";
    case AllreduceAlgorithm::RecursiveDoubling: return "recursive doubling";
    case AllreduceAlgorithm::Ring: return "ring";
  }
  return "unknown";
}

void allreduce(Collective& c, const Buffer& data, ReduceOp op) {
  checkReduction(op, data.dtype);
  if (c.size() > 1) {
    switch (hierarchy::planAllreduce(topologyOf(c), data.bytes(), data.count)) {
      case hierarchy::Schedule::SplitRail: {
        trace(c, "allreduce", "split rail", data.bytes());
        hierarchy::HostNodeSteps node(c);
        return hierarchy::allreduceSplitRail(c, node, data, op);
      }
      case hierarchy::Schedule::Leaders: {
        trace(c, "allreduce", "node leaders", data.bytes());
        hierarchy::HostNodeSteps node(c);
        return hierarchy::allreduceLeaders(c, node, data, op);
      }
      default: break;
    }
  }
  if (auto* arena = arenaFor(c, data.bytes())) {
    trace(c, "allreduce", "shared memory", data.bytes());
    return shm::allreduce(c, *arena, data, op);
  }
  const auto algorithm = chooseAllreduce(data.bytes(), data.count, c.size());
  trace(c, "allreduce", toString(algorithm), data.bytes());
  switch (algorithm) {
    case AllreduceAlgorithm::Local: return;  // AVG over one rank divides by one
    case AllreduceAlgorithm::RecursiveDoubling: return algorithms::allreduceRecursiveDoubling(c, data, op);
    case AllreduceAlgorithm::Ring: return algorithms::allreduceRing(c, data, op, settings().pipelineChunkBytes);
  }
}

void reduce(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  checkReduction(op, input.dtype);
  checkRoot(c, root);
  if (c.size() == 1) {
    if (output.data != input.data) std::memcpy(output.data, input.data, input.bytes());
    return;
  }
  if (hierarchy::planRooted(topologyOf(c)) == hierarchy::Schedule::Rails) {
    trace(c, "reduce", "rails", input.bytes());
    hierarchy::HostNodeSteps node(c);
    hierarchy::reduceRails(c, node, input, output, op, root);
  } else if (auto* arena = arenaFor(c, input.bytes())) {
    trace(c, "reduce", "shared memory", input.bytes());
    shm::reduce(c, *arena, input, output, op, root);
  } else if (input.bytes() >= settings().reduceRingMinBytes && input.count >= size_t(c.size())) {
    trace(c, "reduce", "ring reduce-scatter + gather", input.bytes());
    algorithms::reduceRing(c, input, output, op, root, settings().pipelineChunkBytes);
  } else {
    trace(c, "reduce", "binomial tree", input.bytes());
    algorithms::reduceBinomial(c, input, output, op, root);
  }
}

void broadcast(Collective& c, const Buffer& data, int root) {
  checkRoot(c, root);
  if (c.size() == 1) return;
  if (hierarchy::planRooted(topologyOf(c)) == hierarchy::Schedule::Rails) {
    trace(c, "broadcast", "rails", data.bytes());
    hierarchy::HostNodeSteps node(c);
    hierarchy::broadcastRails(c, node, data, root);
  } else if (auto* arena = arenaFor(c, data.bytes())) {
    trace(c, "broadcast", "shared memory", data.bytes());
    shm::broadcast(c, *arena, data, root);
  } else if (data.bytes() >= settings().broadcastChainMinBytes) {
    trace(c, "broadcast", "pipelined chain", data.bytes());
    algorithms::broadcastChain(c, data, root, settings().pipelineChunkBytes);
  } else {
    trace(c, "broadcast", "binomial tree", data.bytes());
    algorithms::broadcastBinomial(c, data, root);
  }
}

void allgather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  checkParts(c, outputs, "output");
  if (c.size() > 1 && hierarchy::planAllgather(topologyOf(c)) == hierarchy::Schedule::Rails) {
    trace(c, "allgather", "rails", totalBytes(outputs));
    hierarchy::HostNodeSteps node(c);
    hierarchy::allgatherRails(c, node, input, outputs);
  } else if (auto* arena = arenaFor(c, totalBytes(outputs))) {
    trace(c, "allgather", "shared memory", totalBytes(outputs));
    shm::allgather(c, *arena, input, outputs);
  } else if (totalBytes(outputs) >= settings().allgatherRingMinBytes) {
    trace(c, "allgather", "ring", totalBytes(outputs));
    algorithms::allgatherRing(c, input, outputs);
  } else {
    trace(c, "allgather", "direct", totalBytes(outputs));
    algorithms::allgatherDirect(c, input, outputs);
  }
}

void gather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs, int root) {
  checkRoot(c, root);
  if (c.rank() == root) checkParts(c, outputs, "output");
  trace(c, "gather", "linear", input.bytes());
  algorithms::gatherLinear(c, input, outputs, root);
}

void scatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, int root) {
  checkRoot(c, root);
  if (c.rank() == root) checkParts(c, inputs, "input");
  trace(c, "scatter", "linear", output.bytes());
  algorithms::scatterLinear(c, inputs, output, root);
}

void reduceScatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op) {
  checkReduction(op, output.dtype);
  checkParts(c, inputs, "input");
  if (c.size() > 1 && hierarchy::planAllgather(topologyOf(c)) == hierarchy::Schedule::Rails) {
    trace(c, "reduce_scatter", "rails", totalBytes(inputs));
    hierarchy::HostNodeSteps node(c);
    return hierarchy::reduceScatterRails(c, node, inputs, output, op);
  }
  if (auto* arena = arenaFor(c, totalBytes(inputs))) {
    trace(c, "reduce_scatter", "shared memory", totalBytes(inputs));
    return shm::reduceScatter(c, *arena, inputs, output, op);
  }
  trace(c, "reduce_scatter", "ring", totalBytes(inputs));
  algorithms::reduceScatterRing(c, inputs, output, op, settings().pipelineChunkBytes);
}

void alltoall(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs) {
  checkParts(c, inputs, "input");
  checkParts(c, outputs, "output");
  // Every rank of a host calls the arena (sizes differ between ranks, so they cannot choose by size
  // locally); the shared-memory algorithm agrees on the sizes first.
  if (c.size() > 1) {
    if (auto* arena = c.group().arena(c.deadline())) {
      trace(c, "alltoall", "shared memory", totalBytes(inputs));
      return shm::alltoall(c, *arena, inputs, outputs);
    }
  }
  trace(c, "alltoall", "pairwise", totalBytes(inputs));
  algorithms::alltoallPairwise(c, inputs, outputs);
}

void barrier(Collective& c) {
  trace(c, "barrier", "dissemination", 0);
  algorithms::barrierDissemination(c);
}

}  // namespace hier::transport
