// Which schedule a collective takes on a communicator whose ranks span several hosts. Pure functions of
// the topology and the size, so every rank chooses the same, and the choices are unit-tested.
//
//   Flat       the communicator's own algorithms (UCX; shared memory when it is one host). When the
//              hierarchy does not pay: one node, one rank per node, HIER_HIERARCHY=0.
//   SplitRail  allreduce, uniform layouts, large buffers: node reduce-scatter (each local rank owns
//              1/L of the buffer), concurrent allreduces of those parts across nodes (one per rail),
//              node allgather. Each network link carries 1/L of the data.
//   Leaders    allreduce otherwise: node reduce to the first rank, allreduce among the nodes' first
//              ranks, node broadcast. Fewest network messages; any layout.
//   Rails      allgather, reduce_scatter, broadcast and reduce on uniform layouts: a network phase on
//              the rails and a node phase, each moving only what its link must.
#pragma once

#include <cstddef>

#include "transport/hierarchy/topology.h"

namespace hier::transport::hierarchy {

enum class Schedule { Flat, SplitRail, Leaders, Rails };
const char* toString(Schedule schedule);

// A hierarchy exists: several nodes, at least one of them with several ranks, and HIER_HIERARCHY is not 0.
bool layered(const Topology& topology);

Schedule planAllreduce(const Topology& topology, size_t bytes, size_t count);
// allgather and reduce_scatter (every rank's part moves to or from every rank).
Schedule planAllgather(const Topology& topology);
// broadcast and reduce (one root).
Schedule planRooted(const Topology& topology);

}  // namespace hier::transport::hierarchy
