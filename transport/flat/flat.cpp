#include "transport/flat/flat.h"

#include <cstring>
#include <string>

#include "transport/arena/node_arena.h"
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
  if (c.size() == 1) return;  // AVG over one rank divides by one
  pick(c, flatAllreduceRows(), "allreduce", shapeOf(c, data.bytes(), data.count)).run(c, data, op);
}

void reduce(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  if (c.size() == 1) {
    if (output.data != input.data) std::memcpy(output.data, input.data, input.bytes());
    return;
  }
  pick(c, flatReduceRows(), "reduce", shapeOf(c, input.bytes(), input.count)).run(c, input, output, op, root);
}

void broadcast(Collective& c, const Buffer& data, int root) {
  if (c.size() == 1) return;
  pick(c, flatBroadcastRows(), "broadcast", shapeOf(c, data.bytes(), data.count)).run(c, data, root);
}

void allgather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  pick(c, flatAllgatherRows(), "allgather", shapeOf(c, totalBytes(outputs), totalCount(outputs)))
      .run(c, input, outputs);
}

void reduceScatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op) {
  pick(c, flatReduceScatterRows(), "reduce_scatter", shapeOf(c, totalBytes(inputs), totalCount(inputs)))
      .run(c, inputs, output, op);
}

}  // namespace hier::transport::flat
