#include "transport/select/dispatch.h"

#include <string>

#include "transport/base/error.h"
#include "transport/flat/flat.h"
#include "transport/hierarchy/host_node_steps.h"
#include "transport/select/algorithm_table.h"

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

// The row for this call, said in the log as HIER_DEBUG asks.
template <typename R>
const R& chosen(Collective& c, CollectiveKind kind, std::span<const R> table, const Shape& shape) {
  const R& row = choose(kind, table, shape);
  flat::trace(c, toString(kind), row.name, shape.bytes);
  return row;
}

// Whether `input` lies in host memory that overlaps a part of `outputs` other than this rank's own. The
// input that is this rank's own part is the in-place call.
bool overlapsAnotherPart(const Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  if (input.memory != MemoryType::Host || input.bytes() == 0) return false;
  const char* begin = input.bytePtr();
  const char* end = begin + input.bytes();
  for (int r = 0; r < int(outputs.size()); ++r) {
    const Buffer& out = outputs[size_t(r)];
    if (r == c.rank() && out.data == input.data) continue;
    if (out.bytePtr() < end && begin < out.bytePtr() + out.bytes()) return true;
  }
  return false;
}

}  // namespace

void allreduce(Collective& c, const Buffer& data, ReduceOp op) {
  checkReduction(op, data.dtype);
  if (c.size() == 1) return flat::allreduce(c, data, op);  // one rank: nothing to choose
  const auto& row = chosen(c, CollectiveKind::Allreduce, allreduceTable(), flat::shapeOf(c, data.bytes(), data.count));
  if (row.road == Road::Schedule) {
    hierarchy::HostNodeSteps node(c);
    row.schedule(c, node, data, op, std::nullopt);
  } else {
    row.run(c, data, op);
  }
  lastChosenAlgorithm = row.name;
}

void reduce(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  checkReduction(op, input.dtype);
  checkRoot(c, root);
  if (c.size() == 1) return flat::reduce(c, input, output, op, root);
  const auto& row = chosen(c, CollectiveKind::Reduce, reduceTable(), flat::shapeOf(c, input.bytes(), input.count));
  if (row.road == Road::Schedule) {
    hierarchy::HostNodeSteps node(c);
    row.schedule(c, node, input, output, op, root, std::nullopt);
  } else {
    row.run(c, input, output, op, root);
  }
  lastChosenAlgorithm = row.name;
}

void broadcast(Collective& c, const Buffer& data, int root) {
  checkRoot(c, root);
  if (c.size() == 1) return flat::broadcast(c, data, root);
  const auto& row = chosen(c, CollectiveKind::Broadcast, broadcastTable(), flat::shapeOf(c, data.bytes(), data.count));
  if (row.road == Road::Schedule) {
    hierarchy::HostNodeSteps node(c);
    row.schedule(c, node, data, root);
  } else {
    row.run(c, data, root);
  }
  lastChosenAlgorithm = row.name;
}

void allgather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  checkParts(c, outputs, "output");
  // An input in another rank's output part (all_gather(parts, parts[0]) on rank 1) would be overwritten
  // by that part while peers may still read it: the algorithms get a copy of it then.
  std::vector<char> copy;
  Buffer in = input;
  if (overlapsAnotherPart(c, input, outputs)) {
    copy.assign(input.bytePtr(), input.bytePtr() + input.bytes());
    in.data = copy.data();
  }
  const auto& row = chosen(c, CollectiveKind::Allgather, allgatherTable(),
                           flat::shapeOf(c, totalBytes(outputs), totalCount(outputs)));
  if (row.road == Road::Schedule) {
    hierarchy::HostNodeSteps node(c);
    row.schedule(c, node, in, outputs);
  } else {
    row.run(c, in, outputs);
  }
  lastChosenAlgorithm = row.name;
}

// Every rank's part is as large as every other's (the plugin's agreement checks it): each rank then
// chooses the algorithm from its own part's size, alike.
void gather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs, int root) {
  checkRoot(c, root);
  if (c.rank() == root) checkParts(c, outputs, "output");
  const auto& row = chosen(c, CollectiveKind::Gather, gatherTable(), flat::shapeOf(c, input.bytes(), input.count));
  row.run(c, input, outputs, root);
  lastChosenAlgorithm = row.name;
}

void scatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, int root) {
  checkRoot(c, root);
  if (c.rank() == root) checkParts(c, inputs, "input");
  const auto& row = chosen(c, CollectiveKind::Scatter, scatterTable(), flat::shapeOf(c, output.bytes(), output.count));
  row.run(c, inputs, output, root);
  lastChosenAlgorithm = row.name;
}

void reduceScatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op) {
  checkReduction(op, output.dtype);
  checkParts(c, inputs, "input");
  const auto& row = chosen(c, CollectiveKind::ReduceScatter, reduceScatterTable(),
                           flat::shapeOf(c, totalBytes(inputs), totalCount(inputs)));
  if (row.road == Road::Schedule) {
    hierarchy::HostNodeSteps node(c);
    row.schedule(c, node, inputs, output, op, std::nullopt);
  } else {
    row.run(c, inputs, output, op);
  }
  lastChosenAlgorithm = row.name;
}

void alltoall(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
              const std::vector<uint64_t>* known) {
  if (known != nullptr && known->size() != 2 * size_t(c.size()) * size_t(c.size())) {
    throw Error(ErrorKind::Internal, "alltoall: " + std::to_string(known->size()) + " known split sizes for " +
                                         std::to_string(c.size()) + " ranks");
  }
  checkParts(c, inputs, "input");
  checkParts(c, outputs, "output");
  // The ranks pass different sizes: the shape carries none (algorithm_table.cpp); the log says the bytes
  // this rank sends.
  const Shape shape = flat::shapeOf(c, 0, 0);
  const auto& row = choose(CollectiveKind::Alltoall, alltoallTable(), shape);
  flat::trace(c, "alltoall", row.name, totalBytes(inputs));
  row.run(c, inputs, outputs, known);
  lastChosenAlgorithm = row.name;
}

void barrier(Collective& c) {
  const auto& row = chosen(c, CollectiveKind::Barrier, barrierTable(), Shape{0, 0, c.size()});
  row.run(c);
  lastChosenAlgorithm = row.name;
}

}  // namespace hier::transport
