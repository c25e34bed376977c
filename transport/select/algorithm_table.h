// Every collective's whole table, for host and device memory alike: one row per way the collective can
// go, in the order the default rule tries them. A row has a name (what HIER_ALGORITHMS and the log call
// it), a road (which memory it serves, and what runs it), when it can run at all (applies), when the
// default rule wants it (preferred), and the function that runs it. The rows of the hierarchical
// schedules, NCCL and staging come first; then the group's own algorithms (flat/flat_table.h).
//
// The choice is the first row, in table order, that serves the call's memory, is preferred and applies;
// failing that, the first that serves it and applies. HIER_ALGORITHMS overrides that rule per
// collective, memory and size range:
//
//   HIER_ALGORITHMS="allreduce=ring@64K-;broadcast=binomial@-1M;cuda:allgather=staged"
//
// Each item is [cpu:|cuda:]<collective>=<algorithm>[@<from>-<to>]: bytes of the whole buffer, `from`
// included and `to` excluded, either bound left out for none; without cpu: or cuda:, for calls on either.
// The first item that matches a call wins. A row that does not apply to a call (a ring over fewer
// elements than ranks, a hierarchical schedule on one host) is passed over for the default rule's choice,
// said once in the log; one that cannot serve the call's memory (a host algorithm for CUDA tensors) fails
// the call, naming the rows that can. The steps of a hierarchical schedule keep to the default rule.
// Every rank must see the same setting: the choice is made by each rank alone, from what every rank of
// the call knows alike.
//
// Adding an algorithm: its own file, one row here or in flat/flat_table.cpp (with its declaration), and
// the build. The tests read the tables: a new row is tested as soon as it is there.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/base/error.h"
#include "transport/base/types.h"
#include "transport/flat/flat_table.h"
#include "transport/flat/shape.h"
#include "transport/group/collective.h"
#include "transport/hierarchy/node_steps.h"

namespace hier::transport {

// How a row's collective goes, and so which memory it serves.
enum class Road {
  Host,      // an algorithm on host memory (run): the group's own, or all-to-all's carried schedules
  Schedule,  // a hierarchical schedule (schedule): node steps in host or device memory, network steps on host memory
  Nccl,      // device memory on one host: NCCL over the whole group, enqueued by the CUDA path
  Staged,    // device memory: copied to pinned host memory, the host collective, copied back (the CUDA path)
};
bool serves(Road road, MemoryType memory);

template <typename Run, typename Schedule>
struct Row {
  std::string_view name;
  Road road;
  bool (*applies)(const Shape&);
  bool (*preferred)(const Shape&);
  Run run = nullptr;            // Road::Host
  Schedule schedule = nullptr;  // Road::Schedule

  bool serves(MemoryType memory) const { return transport::serves(road, memory); }
};

using NoSchedule = void (*)();
using AllreduceRow = Row<decltype(FlatAllreduce::run),
                         void (*)(Collective&, hierarchy::NodeSteps&, const Buffer&, ReduceOp, std::optional<double>)>;
using ReduceRow = Row<decltype(FlatReduce::run), void (*)(Collective&, hierarchy::NodeSteps&, const Buffer&,
                                                          const Buffer&, ReduceOp, int, std::optional<double>)>;
using BroadcastRow =
    Row<decltype(FlatBroadcast::run), void (*)(Collective&, hierarchy::NodeSteps&, const Buffer&, int)>;
using AllgatherRow = Row<decltype(FlatAllgather::run),
                         void (*)(Collective&, hierarchy::NodeSteps&, const Buffer&, const std::vector<Buffer>&)>;
using GatherRow = Row<decltype(FlatGather::run), NoSchedule>;
using ScatterRow = Row<decltype(FlatScatter::run), NoSchedule>;
using ReduceScatterRow =
    Row<decltype(FlatReduceScatter::run), void (*)(Collective&, hierarchy::NodeSteps&, const std::vector<Buffer>&,
                                                   const Buffer&, ReduceOp, std::optional<double>)>;
using AlltoallRow = Row<decltype(FlatAlltoall::run), NoSchedule>;
using BarrierRow = Row<decltype(FlatBarrier::run), NoSchedule>;

std::span<const AllreduceRow> allreduceTable();
std::span<const ReduceRow> reduceTable();
std::span<const BroadcastRow> broadcastTable();
std::span<const AllgatherRow> allgatherTable();
std::span<const GatherRow> gatherTable();
std::span<const ScatterRow> scatterTable();
std::span<const ReduceScatterRow> reduceScatterTable();
std::span<const AlltoallRow> alltoallTable();
std::span<const BarrierRow> barrierTable();

// The names in `kind`'s table, in table order; with `memory`, only those of the rows that serve it.
std::vector<std::string_view> algorithmNames(CollectiveKind kind, std::optional<MemoryType> memory = std::nullopt);
// Whether `name` of `kind`'s table serves `shape`'s memory and applies to it. Throws std::invalid_argument
// for an unknown name.
bool algorithmApplies(CollectiveKind kind, std::string_view name, const Shape& shape);

// The algorithm HIER_ALGORITHMS names for `kind` on `memory` at `bytes`, or empty. Throws
// Error(InvalidUsage) when the setting cannot be read (an unknown collective or algorithm, a malformed
// range).
std::string_view algorithmOverride(CollectiveKind kind, MemoryType memory, size_t bytes);
// Replaces what HIER_ALGORITHMS said, in this process (tests); "" removes every override. Throws
// Error(InvalidUsage) as algorithmOverride() would.
void setAlgorithms(const std::string& text);

// Says once per process that an override was passed over for this call.
void noteOverridePassedOver(CollectiveKind kind, std::string_view name, const Shape& shape);
// Throws the error of an override whose row cannot serve the call's memory.
[[noreturn]] void overrideCannotServe(CollectiveKind kind, std::string_view name, MemoryType memory);

// The algorithm of the last collective this thread ran to its end (tests, the transport benchmark).
inline thread_local std::string_view lastChosenAlgorithm;

// The row for this call: the override when it applies, else the default rule.
template <typename R>
const R& choose(CollectiveKind kind, std::span<const R> table, const Shape& shape) {
  if (auto forced = algorithmOverride(kind, shape.memory, shape.bytes); !forced.empty()) {
    for (const auto& row : table) {
      if (row.name != forced) continue;
      if (!row.serves(shape.memory)) overrideCannotServe(kind, forced, shape.memory);
      if (row.applies(shape)) return row;
      noteOverridePassedOver(kind, forced, shape);
      break;
    }
  }
  return defaultRule(table, shape);
}

}  // namespace hier::transport
