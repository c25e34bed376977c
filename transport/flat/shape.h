// What a collective's algorithm is chosen from: the call's shape, the same on every rank of the call.
#pragma once

#include <cstddef>
#include <functional>

#include "transport/base/types.h"
#include "transport/topology/topology.h"

namespace hier::transport {

enum class CollectiveKind {
  Allreduce,
  Reduce,
  Broadcast,
  Allgather,
  Gather,
  Scatter,
  ReduceScatter,
  Alltoall,
  Barrier
};
inline constexpr CollectiveKind kCollectiveKinds[] = {
    CollectiveKind::Allreduce,     CollectiveKind::Reduce,   CollectiveKind::Broadcast,
    CollectiveKind::Allgather,     CollectiveKind::Gather,   CollectiveKind::Scatter,
    CollectiveKind::ReduceScatter, CollectiveKind::Alltoall, CollectiveKind::Barrier};
// "allreduce", "reduce_scatter", ...: the names HIER_ALGORITHMS uses.
const char* toString(CollectiveKind kind);

struct Shape {
  size_t bytes = 0;  // the whole buffer (for list forms, every part); 0 for all-to-all, whose sizes differ
  size_t count = 0;  // its elements
  int size = 1;      // ranks
  // How the ranks spread over hosts; null for one rank.
  const Topology* topology = nullptr;
  // Where the buffers live. For device memory, two things only the call knows: whether NCCL takes these
  // buffers with this op (contiguous, one device, a type and op it has), and how many tensors the call
  // coalesces (a hierarchical schedule takes one).
  MemoryType memory = MemoryType::Host;
  bool ncclTakes = false;
  size_t tensors = 1;
  // Whether the group's shared-memory arena could be set up (asked only when an algorithm needs it).
  std::function<bool()> arenaReady = [] { return false; };
  // ... and whether its ranks may read each other's memory (cross-memory attach).
  std::function<bool()> crossMemoryAttach = [] { return false; };
  // ... and whether one copy that way was fast enough when the arena timed it (NodeArena::singleCopyFast).
  std::function<bool()> singleCopyFast = [] { return false; };
  // ... and whether every rank there may have a CPU of its own (NodeArena::coreForEachRank).
  std::function<bool()> coreForEachRank = [] { return false; };
  // A step of a hierarchical schedule on a sub-group.
  bool step = false;

  bool oneHost() const { return topology == nullptr || topology->nodeCount() == 1; }
};

}  // namespace hier::transport
