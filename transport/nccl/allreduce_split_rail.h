// Split-rail allreduce of a device buffer on a group that spans hosts: the schedule of
// hierarchy/allreduce_split_rail.cpp, with the same fragments, parts and pipeline (hierarchy/pipeline.h),
// NCCL doing the node steps. Per fragment: NCCL reduce-scatters it inside the node; the part this rank
// owns is copied to pinned host memory, allreduced across the nodes on this rank's rail over UCX, and
// copied back; NCCL all-gathers the fragment inside the node. While the rail carries fragment f, the
// device already reduces fragment f + 1 and gathers fragment f - 1; two pinned slots take turns.
//
// UCX moves the host copies rather than the device memory itself: GPU-direct transfers need a UCX built
// with CUDA support and a network that can reach device memory, which this path does not assume.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>

#include "transport/collective.h"
#include "transport/nccl/nccl_communicator.h"
#include "transport/types.h"

namespace hier::transport::nccl {

struct DeviceAllreduce {
  void* data;  // on node's device
  size_t count;
  DataType dtype;  // NCCL's view of it (complex tensors as pairs of reals)
  ReduceOp op;     // AVG divides by the whole group's size at the end; no bitwise ops (NCCL has none)
  std::optional<double> premultiply;  // PREMUL_SUM's factor, applied to the sum (it is linear)
};

// The pinned host memory allreduceSplitRail needs for `count` elements on a node of `localSize` ranks.
size_t splitRailPinnedBytes(size_t count, DataType dtype, int localSize);

// `c`: the collective on the group's host communicator, whose rail sub-communicator carries the network
// steps. `node`: NCCL over the ranks of this rank's node, in node order. Enqueues the device steps on
// `stream` and returns when the last one is enqueued: the caller treats `stream` as after any NCCL call.
// Throws Error (and aborts what waits) when a step fails or passes the collective's deadline.
void allreduceSplitRail(Collective& c, Communicator& node, const DeviceAllreduce& allreduce, cudaStream_t stream,
                        void* pinned);

}  // namespace hier::transport::nccl
