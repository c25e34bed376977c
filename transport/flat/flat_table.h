// A group's own algorithms on host memory, in one table per collective: a name, when the algorithm can
// run at all (applies), when the default rule wants it (preferred), and the function that runs it. These
// rows end every collective's whole table (select/algorithm_table.h), and the steps of a hierarchical
// schedule choose from them alone, by the default rule.
//
// Adding an algorithm: its own file, one row here (with its declaration beside it), and the build.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "transport/base/error.h"
#include "transport/base/types.h"
#include "transport/flat/shape.h"
#include "transport/group/collective.h"

namespace hier::transport {

template <typename... Args>
struct FlatRow {
  std::string_view name;
  bool (*applies)(const Shape&);
  bool (*preferred)(const Shape&);
  void (*run)(Collective&, Args...);

  // The group's own algorithms move host memory only.
  bool serves(MemoryType memory) const { return memory == MemoryType::Host; }
};

using FlatAllreduce = FlatRow<const Buffer&, ReduceOp>;
using FlatReduce = FlatRow<const Buffer&, const Buffer&, ReduceOp, int>;
using FlatBroadcast = FlatRow<const Buffer&, int>;
using FlatAllgather = FlatRow<const Buffer&, const std::vector<Buffer>&>;
using FlatGather = FlatRow<const Buffer&, const std::vector<Buffer>&, int>;
using FlatScatter = FlatRow<const std::vector<Buffer>&, const Buffer&, int>;
using FlatReduceScatter = FlatRow<const std::vector<Buffer>&, const Buffer&, ReduceOp>;
// The last argument: every rank's split sizes when known and checked (split_sizes.h), else null.
using FlatAlltoall = FlatRow<const std::vector<Buffer>&, const std::vector<Buffer>&, const std::vector<uint64_t>*>;
using FlatBarrier = FlatRow<>;

std::span<const FlatAllreduce> flatAllreduceRows();
std::span<const FlatReduce> flatReduceRows();
std::span<const FlatBroadcast> flatBroadcastRows();
std::span<const FlatAllgather> flatAllgatherRows();
std::span<const FlatGather> flatGatherRows();
std::span<const FlatScatter> flatScatterRows();
std::span<const FlatReduceScatter> flatReduceScatterRows();
std::span<const FlatAlltoall> flatAlltoallRows();
std::span<const FlatBarrier> flatBarrierRows();

// Predicates every table uses.
inline bool always(const Shape&) { return true; }
inline bool never(const Shape&) { return false; }  // only when HIER_ALGORITHMS asks for it

// The default rule: the first row, in table order, that serves the call's memory, is preferred and
// applies; failing that, the first that serves it and applies. Preferred first: applies() may set
// things up (the shared-memory arena), which only a wanted algorithm should cost.
template <typename Row>
const Row& defaultRule(std::span<const Row> rows, const Shape& shape) {
  for (const auto& row : rows) {
    if (row.serves(shape.memory) && row.preferred(shape) && row.applies(shape)) return row;
  }
  for (const auto& row : rows) {
    if (row.serves(shape.memory) && row.applies(shape)) return row;
  }
  throw Error(ErrorKind::Internal, "no algorithm applies to this call");
}

}  // namespace hier::transport
