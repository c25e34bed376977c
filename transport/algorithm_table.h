// Each collective's algorithms, in one table per collective: a name, when the algorithm can run at all
// (applies), when the default rule wants it (preferred), and the function that runs it. The choice is
// the first entry, in table order, that is preferred and applies; failing that, the first that applies.
// HIER_ALGORITHMS overrides the rule per collective and size range:
//
//   HIER_ALGORITHMS="allreduce=ring@64K-;broadcast=binomial@-1M;allgather=direct"
//
// Each item is <collective>=<algorithm>[@<from>-<to>], bytes of the whole buffer, `from` included and
// `to` excluded, either bound left out for none; the first item that matches a call wins. An algorithm
// that does not apply to a call (a ring over fewer elements than ranks, a hierarchical schedule on one
// host) is passed over for the default rule's choice, said once in the log. The steps a hierarchical
// schedule runs on its sub-groups keep to the default rule. Every rank must see the same setting: the
// choice is made by each rank alone, from what every rank of the call knows alike.
//
// Adding an algorithm: its own file, one row in its collective's table (algorithm_table.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/collective.h"
#include "transport/hierarchy/topology.h"
#include "transport/types.h"

namespace hier::transport {

enum class CollectiveKind { Allreduce, Reduce, Broadcast, Allgather, Gather, Scatter, ReduceScatter, Alltoall, Barrier };
inline constexpr CollectiveKind kCollectiveKinds[] = {
    CollectiveKind::Allreduce, CollectiveKind::Reduce,        CollectiveKind::Broadcast,
    CollectiveKind::Allgather, CollectiveKind::Gather,        CollectiveKind::Scatter,
    CollectiveKind::ReduceScatter, CollectiveKind::Alltoall, CollectiveKind::Barrier};
// "allreduce", "reduce_scatter", ...: the names HIER_ALGORITHMS uses.
const char* toString(CollectiveKind kind);

// What the choice is made from: the same on every rank of the call.
struct Shape {
  size_t bytes = 0;  // the whole buffer (for list forms, every part); 0 for all-to-all, whose sizes differ
  size_t count = 0;  // its elements
  int size = 1;      // ranks
  // How the ranks spread over hosts; null for one rank.
  const hierarchy::Topology* topology = nullptr;
  // Whether the group's shared-memory arena could be set up (asked only when an algorithm needs it).
  std::function<bool()> arenaReady = [] { return false; };
  // ... and whether its ranks may read each other's memory (cross-memory attach).
  std::function<bool()> crossMemoryAttach = [] { return false; };
  // ... and whether one copy that way was fast enough when the arena timed it (NodeArena::singleCopyFast).
  std::function<bool()> singleCopyFast = [] { return false; };
  // ... and whether every rank there may have a CPU of its own (NodeArena::coreForEachRank).
  std::function<bool()> coreForEachRank = [] { return false; };
  // A step of a hierarchical schedule on a sub-group: HIER_ALGORITHMS names the algorithm of the
  // collective the caller made, so the schedule's own steps keep to the default rule.
  bool step = false;

  bool oneHost() const { return topology != nullptr && topology->nodeCount() == 1; }
};

template <typename... Args>
struct Algorithm {
  std::string_view name;
  bool (*applies)(const Shape&);
  bool (*preferred)(const Shape&);
  void (*run)(Collective&, Args...);
};

using AllreduceAlgorithm = Algorithm<const Buffer&, ReduceOp>;
using ReduceAlgorithm = Algorithm<const Buffer&, const Buffer&, ReduceOp, int>;
using BroadcastAlgorithm = Algorithm<const Buffer&, int>;
using AllgatherAlgorithm = Algorithm<const Buffer&, const std::vector<Buffer>&>;
using GatherAlgorithm = Algorithm<const Buffer&, const std::vector<Buffer>&, int>;
using ScatterAlgorithm = Algorithm<const std::vector<Buffer>&, const Buffer&, int>;
using ReduceScatterAlgorithm = Algorithm<const std::vector<Buffer>&, const Buffer&, ReduceOp>;
// The last argument: every rank's split sizes when known and checked (collectives.h), else null.
using AlltoallAlgorithm = Algorithm<const std::vector<Buffer>&, const std::vector<Buffer>&, const std::vector<uint64_t>*>;
using BarrierAlgorithm = Algorithm<>;

std::span<const AllreduceAlgorithm> allreduceAlgorithms();
std::span<const ReduceAlgorithm> reduceAlgorithms();
std::span<const BroadcastAlgorithm> broadcastAlgorithms();
std::span<const AllgatherAlgorithm> allgatherAlgorithms();
std::span<const GatherAlgorithm> gatherAlgorithms();
std::span<const ScatterAlgorithm> scatterAlgorithms();
std::span<const ReduceScatterAlgorithm> reduceScatterAlgorithms();
std::span<const AlltoallAlgorithm> alltoallAlgorithms();
std::span<const BarrierAlgorithm> barrierAlgorithms();

// The names in `kind`'s table, in table order.
std::vector<std::string_view> algorithmNames(CollectiveKind kind);
// Whether `name` of `kind`'s table applies to `shape`. Throws std::invalid_argument for an unknown name.
bool algorithmApplies(CollectiveKind kind, std::string_view name, const Shape& shape);

// The algorithm HIER_ALGORITHMS names for `kind` at `bytes`, or empty. Throws Error(InvalidUsage) when
// the setting cannot be read (an unknown collective or algorithm, a malformed range).
std::string_view algorithmOverride(CollectiveKind kind, size_t bytes);
// Replaces what HIER_ALGORITHMS said, in this process (tests); "" removes every override. Throws
// Error(InvalidUsage) as algorithmOverride() would.
void setAlgorithms(const std::string& text);

// Says once per process that an override was passed over for this call.
void noteOverridePassedOver(CollectiveKind kind, std::string_view name, const Shape& shape);

// The algorithm of the last collective this thread ran to its end (tests, the transport benchmark).
// Set by the collective, not by choose(): a hierarchical schedule runs collectives of its own inside.
inline thread_local std::string_view lastChosenAlgorithm;

// The algorithm for this call: the override when it applies, else the default rule.
template <typename... Args>
const Algorithm<Args...>& choose(CollectiveKind kind, std::span<const Algorithm<Args...>> table, const Shape& shape) {
  if (auto forced = shape.step ? std::string_view() : algorithmOverride(kind, shape.bytes); !forced.empty()) {
    for (const auto& algorithm : table) {
      if (algorithm.name != forced) continue;
      if (algorithm.applies(shape)) return algorithm;
      noteOverridePassedOver(kind, forced, shape);
      break;
    }
  }
  // Preferred first: applies() may set things up (the shared-memory arena), which only a wanted
  // algorithm should cost.
  for (const auto& algorithm : table) {
    if (algorithm.preferred(shape) && algorithm.applies(shape)) return algorithm;
  }
  for (const auto& algorithm : table) {
    if (algorithm.applies(shape)) return algorithm;
  }
  return table.back();  // every table ends with an algorithm that always applies
}

}  // namespace hier::transport
