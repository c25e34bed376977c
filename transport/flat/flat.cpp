#include "transport/flat/flat.h"

#include <cstring>
#include <string>

#include "transport/arena/node_arena.h"
#include "transport/base/error.h"
#include "transport/base/log.h"
#include "transport/flat/flat_table.h"

namespace hier::transport::flat {
namespace {

template <typename Row>
const Row& pick(Collective& c, std::span<const Row> rows, const char* op, const Shape& shape) {
  const Row& row = defaultRule(rows, shape);
  trace(c, op, row.name, shape.bytes);
  return row;
}

// The reductions run on the host's CPU: a schedule hands them host memory (its staging slots).
void requireHostMemory(const Buffer& b, const char* op) {
  if (b.memory != MemoryType::Host) {
    throw Error(ErrorKind::Internal,
                std::string(op) + " on a sub-group reduces on the host, but was given device memory");
  }
}

// A byte-moving step's shape: where its buffers live, too.
Shape shapeOn(Collective& c, size_t bytes, size_t count, const Buffer& buffer) {
  Shape shape = shapeOf(c, bytes, count);
  shape.memory = buffer.memory;
  return shape;
}

}  // namespace

Shape shapeOf(Collective& c, size_t bytes, size_t count) {
  Shape shape{bytes, count, c.size()};
  shape.step = c.isStep();
  if (c.size() > 1) shape.topology = &c.group().topology(c.deadline());
  shape.arenaReady = [&c] { return c.group().arena(c.deadline()) != nullptr; };
  // What the arena found when it was set up; false where there is none.
  auto arenaFound = [&c](bool (NodeArena::*found)() const) {
    return [&c, found] {
      const auto* arena = c.group().arena(c.deadline());
      return arena != nullptr && (arena->*found)();
    };
  };
  shape.crossMemoryAttach = arenaFound(&NodeArena::crossMemoryAttach);
  shape.singleCopyFast = arenaFound(&NodeArena::singleCopyFast);
  shape.coreForEachRank = arenaFound(&NodeArena::coreForEachRank);
  return shape;
}

void trace(Collective& c, const char* op, std::string_view algorithm, size_t bytes) {
  const std::string what = std::string(op) + ": " + std::string(algorithm);
  if (logEnabled(LogLevel::Debug)) {
    log(LogLevel::Debug, "'" + c.group().name() + "' " + what + ", " + std::to_string(bytes) + " bytes");
  } else if (logEnabled(LogLevel::Info) && c.group().firstUse(what)) {
    log(LogLevel::Info, "'" + c.group().name() + "' " + what + " (first used at " + std::to_string(bytes) + " bytes)");
  }
}

void allreduce(Collective& c, const Buffer& data, ReduceOp op) {
  requireHostMemory(data, "allreduce");
  if (c.size() == 1) return;  // AVG over one rank divides by one
  pick(c, flatAllreduceRows(), "allreduce", shapeOf(c, data.bytes(), data.count)).run(c, data, op);
}

void reduce(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  requireHostMemory(input, "reduce");
  requireHostMemory(output, "reduce");
  if (c.size() == 1) {
    if (output.data != input.data) std::memcpy(output.data, input.data, input.bytes());
    return;
  }
  pick(c, flatReduceRows(), "reduce", shapeOf(c, input.bytes(), input.count)).run(c, input, output, op, root);
}

void broadcast(Collective& c, const Buffer& data, int root) {
  if (c.size() == 1) return;
  pick(c, flatBroadcastRows(), "broadcast", shapeOn(c, data.bytes(), data.count, data)).run(c, data, root);
}

void allgather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  if (input.memory != MemoryType::Host && input.data != outputs[size_t(c.rank())].data) {
    throw Error(ErrorKind::Internal,
                "allgather on a sub-group copies its input on the host, but was given device memory");
  }
  pick(c, flatAllgatherRows(), "allgather", shapeOn(c, totalBytes(outputs), totalCount(outputs), input))
      .run(c, input, outputs);
}

void reduceScatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op) {
  requireHostMemory(output, "reduce_scatter");
  for (const auto& input : inputs) requireHostMemory(input, "reduce_scatter");
  pick(c, flatReduceScatterRows(), "reduce_scatter", shapeOf(c, totalBytes(inputs), totalCount(inputs)))
      .run(c, inputs, output, op);
}

}  // namespace hier::transport::flat
