// The decisions of the CUDA path, as pure functions of what every rank knows alike (the topology, the op,
// its size), so that every rank decides the same and the CPU tests can check them
// (tests/plugin/test_cuda_plan.cpp). The CUDA glue in this folder only carries them out. No torch, no
// CUDA here.
#pragma once

#include <string>
#include <vector>

#include "transport/error.h"
#include "transport/hierarchy/planner.h"
#include "transport/hierarchy/topology.h"

namespace hier::cuda_plan {

// The NCCL communicator a group's CUDA collectives run on: over the whole group when it lives on one
// host, else over the ranks of this rank's host (the node steps of the hierarchical schedules). Its
// unique id lives under `key` in the group's store: the same on every member, different for every other
// communicator, and free of anything only one rank knows (such as its CUDA device index).
struct NcclCommunicator {
  std::string key;
  int rank = 0;            // this rank's place in it
  int size = 0;
  std::vector<int> ranks;  // its members, as ranks of the group
};
// `ordinal`: how many NCCL communicators this rank made on the group before this one (one per CUDA
// device it used), which every rank that uses its devices in the same order counts alike.
NcclCommunicator ncclCommunicator(const transport::hierarchy::Topology& topology, int ordinal);

// Which way a CUDA collective goes.
enum class Route {
  Nccl,         // one host: NCCL over the group
  AcrossHosts,  // several hosts: a hierarchical schedule, NCCL inside each host and UCX between them
  Staged,       // through pinned host memory and the group's CPU operation
};
// `ncclCanDo`: NCCL moves and reduces these tensors with this op (contiguous, one device, a dtype and op
// it has). `schedule`: what the planner chose for the op on this topology (Flat where it has none).
Route route(const transport::hierarchy::Topology& topology, bool ncclCanDo, transport::hierarchy::Schedule schedule);
const char* toString(Route route);

// How dist.barrier() with a CUDA device orders the device, as ProcessGroupNCCL's does (its barrier is a
// device allreduce that the host then waits for): on one host a one-element NCCL allreduce on the
// current stream, which the host then waits for; across hosts the host first waits for the current
// stream (the device work issued before the barrier is done), then runs the group's CPU barrier.
enum class Barrier { NcclAllreduce, DrainThenHost };
Barrier barrier(const transport::hierarchy::Topology& topology);

// The CUDA device index a barrier orders, or -1 for none (the CPU barrier). `named`: the first of
// `device_ids`, or -1; `lastUsed`: the device this group last ran on, or -1; `visible`: how many CUDA
// devices this process sees. Where it sees none, device ids name nothing and are ignored, as Gloo does
// (Accelerate passes its local rank on every machine).
int barrierDevice(int named, int lastUsed, int visible);

// Whether a failed CUDA operation leaves the group unusable: always once NCCL was aborted (the next
// operation would find a freed communicator) and for every failure in flight; not for a refusal made
// before anything was enqueued.
bool failsGroup(transport::ErrorKind kind, bool ncclAborted);

}  // namespace hier::cuda_plan
