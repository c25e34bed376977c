#include "transport/collectives.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

#include "transport/algorithm_table.h"
#include "transport/algorithms/algorithms.h"
#include "transport/error.h"
#include "transport/log.h"
#include "transport/reduce.h"
#include "transport/shm/node_arena.h"

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
void trace(Collective& c, const char* op, std::string_view algorithm, size_t bytes) {
  const std::string what = std::string(op) + ": " + std::string(algorithm);
  if (logEnabled(LogLevel::Debug)) {
    log(LogLevel::Debug, "'" + c.group().name() + "' " + what + ", " + std::to_string(bytes) + " bytes");
  } else if (logEnabled(LogLevel::Info) && c.group().firstUse(what)) {
    log(LogLevel::Info, "'" + c.group().name() + "' " + what + " (first used at " + std::to_string(bytes) +
                            " bytes)");
  }
}

// What this call's algorithm is chosen from. The topology is learned once per group, by all its ranks
// together, so only a collective with a choice to make asks for it; the arena likewise, and only when
// an algorithm that would use it is wanted.
Shape shapeOf(Collective& c, size_t bytes, size_t count) {
  Shape shape{bytes, count, c.size()};
  shape.step = c.isStep();
  if (c.size() > 1) shape.topology = &c.group().topology(c.deadline());
  shape.arenaReady = [&c] { return c.group().arena(c.deadline()) != nullptr; };
  // What the arena found when it was set up; false where there is none.
  auto arenaFound = [&c](bool (shm::NodeArena::*found)() const) {
    return [&c, found] {
      const auto* arena = c.group().arena(c.deadline());
      return arena != nullptr && (arena->*found)();
    };
  };
  shape.crossMemoryAttach = arenaFound(&shm::NodeArena::crossMemoryAttach);
  shape.singleCopyFast = arenaFound(&shm::NodeArena::singleCopyFast);
  shape.coreForEachRank = arenaFound(&shm::NodeArena::coreForEachRank);
  return shape;
}

size_t totalCount(const std::vector<Buffer>& parts) {
  size_t total = 0;
  for (auto& part : parts) total += part.count;
  return total;
}

// Runs the algorithm the table gives for this call.
template <typename... Args, typename... Passed>
void dispatch(Collective& c, CollectiveKind kind, std::span<const Algorithm<Args...>> table, const Shape& shape,
              Passed&&... args) {
  const auto& algorithm = choose(kind, table, shape);
  trace(c, toString(kind), algorithm.name, shape.bytes);
  algorithm.run(c, std::forward<Passed>(args)...);
  lastChosenAlgorithm = algorithm.name;
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
  if (c.size() == 1) return;  // AVG over one rank divides by one
  dispatch(c, CollectiveKind::Allreduce, allreduceAlgorithms(), shapeOf(c, data.bytes(), data.count), data, op);
}

void reduce(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  checkReduction(op, input.dtype);
  checkRoot(c, root);
  if (c.size() == 1) {
    if (output.data != input.data) std::memcpy(output.data, input.data, input.bytes());
    return;
  }
  dispatch(c, CollectiveKind::Reduce, reduceAlgorithms(), shapeOf(c, input.bytes(), input.count), input, output, op,
           root);
}

void broadcast(Collective& c, const Buffer& data, int root) {
  checkRoot(c, root);
  if (c.size() == 1) return;
  dispatch(c, CollectiveKind::Broadcast, broadcastAlgorithms(), shapeOf(c, data.bytes(), data.count), data, root);
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
  dispatch(c, CollectiveKind::Allgather, allgatherAlgorithms(), shapeOf(c, totalBytes(outputs), totalCount(outputs)),
           in, outputs);
}

// Every rank's part is as large as every other's (the plugin's agreement checks it): each rank then
// chooses the algorithm from its own part's size, alike.
void gather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs, int root) {
  checkRoot(c, root);
  if (c.rank() == root) checkParts(c, outputs, "output");
  dispatch(c, CollectiveKind::Gather, gatherAlgorithms(), shapeOf(c, input.bytes(), input.count), input, outputs,
           root);
}

void scatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, int root) {
  checkRoot(c, root);
  if (c.rank() == root) checkParts(c, inputs, "input");
  dispatch(c, CollectiveKind::Scatter, scatterAlgorithms(), shapeOf(c, output.bytes(), output.count), inputs,
           output, root);
}

void reduceScatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op) {
  checkReduction(op, output.dtype);
  checkParts(c, inputs, "input");
  dispatch(c, CollectiveKind::ReduceScatter, reduceScatterAlgorithms(),
           shapeOf(c, totalBytes(inputs), totalCount(inputs)), inputs, output, op);
}

uint64_t checkSplitSizes(const std::vector<uint64_t>& sizes, int n, const std::vector<int>& names) {
  auto name = [&](int index) { return names.empty() ? index : names[size_t(index)]; };
  uint64_t largest = 0;
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      const uint64_t sent = sizes[2 * size_t(n) * size_t(s) + size_t(d)];
      const uint64_t expected = sizes[2 * size_t(n) * size_t(d) + size_t(n + s)];
      if (sent != expected) {
        throw Error(ErrorKind::InvalidUsage,
                    "the ranks' split sizes do not match: rank " + std::to_string(name(s)) + " sends " +
                        std::to_string(sent) + " bytes to rank " + std::to_string(name(d)) + ", which expects " +
                        std::to_string(expected) + " bytes from it; give every rank input_split_sizes that match "
                        "the other ranks' output_split_sizes (nothing was sent, and the group stays usable)",
                    {name(s), name(d)});
      }
      largest = std::max(largest, sent);
    }
  }
  return largest;
}

std::vector<uint64_t> splitSizeTable(Collective& c, const std::vector<Buffer>& inputs,
                                     const std::vector<Buffer>& outputs, const std::vector<uint64_t>* known) {
  if (known != nullptr) return *known;
  const size_t n = size_t(c.size()), r = size_t(c.rank());
  std::vector<uint64_t> sizes(2 * n * n);
  std::vector<Buffer> rows;
  for (size_t s = 0; s < n; ++s) rows.push_back(Buffer{&sizes[2 * n * s], 2 * n, DataType::Int64, MemoryType::Host});
  for (size_t p = 0; p < n; ++p) {
    sizes[2 * n * r + p] = inputs[p].bytes();
    sizes[2 * n * r + n + p] = outputs[p].bytes();
  }
  algorithms::allgatherDirect(c, rows[r], rows);
  std::vector<int> names;
  for (size_t s = 0; s < n; ++s) names.push_back(c.communicator().nameOf(int(s)));
  checkSplitSizes(sizes, int(n), names);
  return sizes;
}

uint64_t shareSplitSizes(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                         const std::vector<uint64_t>* known) {
  if (known != nullptr) return *std::max_element(known->begin(), known->end());
  const std::vector<uint64_t> sizes = splitSizeTable(c, inputs, outputs, nullptr);
  return *std::max_element(sizes.begin(), sizes.end());
}

void alltoall(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
              const std::vector<uint64_t>* known) {
  if (known != nullptr && known->size() != 2 * size_t(c.size()) * size_t(c.size())) {
    throw Error(ErrorKind::Internal, "alltoall: " + std::to_string(known->size()) + " known split sizes for " +
                                         std::to_string(c.size()) + " ranks");
  }
  checkParts(c, inputs, "input");
  checkParts(c, outputs, "output");
  // The ranks pass different sizes: the shape carries none (algorithm_table.cpp).
  Shape shape = shapeOf(c, 0, 0);
  const auto& algorithm = choose(CollectiveKind::Alltoall, alltoallAlgorithms(), shape);
  trace(c, "alltoall", algorithm.name, totalBytes(inputs));
  algorithm.run(c, inputs, outputs, known);
  lastChosenAlgorithm = algorithm.name;
}

void barrier(Collective& c) {
  dispatch(c, CollectiveKind::Barrier, barrierAlgorithms(), Shape{0, 0, c.size()});
}

}  // namespace hier::transport
