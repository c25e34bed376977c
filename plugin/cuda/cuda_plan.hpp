// The decisions of the CUDA path, as pure functions of what every rank knows alike (the topology, the op,
// its size), so that every rank decides the same and the CPU tests can check them
// (tests/plugin/test_cuda_plan.cpp). The CUDA glue in this folder only carries them out. No torch, no
// CUDA here.
#pragma once

#include <string>
#include <vector>

#include "transport/base/error.h"
#include "transport/topology/topology.h"

namespace hier::cuda_plan {

// The NCCL communicator a group's CUDA collectives run on: over the whole group when it lives on one
// host, else over the ranks of this rank's host (the node steps of the hierarchical schedules). Its
// unique id lives under `key` in the group's store: the same on every member, different for every other
// communicator, and free of anything only one rank knows (such as its CUDA device index).
struct NcclCommunicator {
  std::string key;
  int rank = 0;  // this rank's place in it
  int size = 0;
  std::vector<int> ranks;  // its members, as ranks of the group
};
// `ordinal`: how many NCCL communicators this rank made on the group before this one (one per CUDA
// device it used), which every rank that uses its devices in the same order counts alike.
NcclCommunicator ncclCommunicator(const transport::Topology& topology, int ordinal);

// The CUDA device index a barrier orders, or -1 for none (the CPU barrier). `named`: the first of
// `device_ids`, or -1; `bound`: the group's bound device (init_process_group(device_id=...)) when it is
// a CUDA one, or -1; `visible`: how many CUDA devices this process sees. Only what every rank passes
// alike decides, never what one rank did before (a rank that ran CUDA work would take the device's
// barrier, its peers the CPU's, and both wait for the deadline). Where the process sees no CUDA device,
// device ids name nothing and are ignored, as Gloo does (Accelerate passes its local rank everywhere).
int barrierDevice(int named, int bound, int visible);

// The CUDA device whose nearest network device this process's UCX takes (transport/ucx/net_devices.h),
// or -1 for none, decided when the first group is made. `current`: torch's current device; `visible`:
// how many this process sees; `localRank`: the launcher's, or -1. Device 0 is the current one until the
// program sets another: with several visible and a local rank, torchrun's convention (device = local
// rank) is the better guess, so that the ranks of a host do not all take the NIC of GPU 0.
int networkDeviceGpu(int current, int visible, int localRank);

// How a group split from this one (new_group on a parent bound to a device, split_group) takes its NCCL
// communicator from this group's with ncclCommSplit, which every rank of this group's communicator must
// call: the color and key this rank passes. `members`: the child's ranks, as ranks of this group, in the
// child's order (split_group makes several children at once, each rank passing its own child's). The communicator made
// is the one ncclCommunicator gives the child (over the whole child on one host, else over its ranks on each host, the
// child's place there the key); a rank of this group's communicator outside the child passes no color (kNoColor) and
// gets none.
struct SplitPlan {
  static constexpr int kNoColor = -1;
  int color = kNoColor;
  int key = 0;
  int size = 0;  // of the communicator made
};
SplitPlan splitOf(const transport::Topology& parent, const std::vector<int>& members);

// Whether a failed CUDA operation leaves the group unusable: always once NCCL was aborted (the next
// operation would find a freed communicator) and for every failure in flight; not for a refusal made
// before anything was enqueued.
bool failsGroup(transport::ErrorKind kind, bool ncclAborted);

}  // namespace hier::cuda_plan
