// hier groups from C++ alone: create one by name, find it by name, destroy it by name.
//
//   auto store = c10::make_intrusive<c10d::TCPStore>(host, storeOptions);
//   auto group = hier::createGroup(store, rank, size, "tp");
//   group->allreduce(tensors)->wait();                       // the ProcessGroup API, or
//   // torch's functional ops, which find the group by its name as they do from Python:
//   //   _c10d_functional::all_reduce(x, "sum", "tp") then _c10d_functional::wait_tensor
//   hier::destroyGroup("tp");
//
// tests/libtorch/named_groups.cpp is a whole program doing this, in processes and in threads.
//
// The group is a c10d::ProcessGroup whose CPU (and, in CUDA builds, CUDA) backend is hier, named and
// registered like the groups torch.distributed makes, so torch.ops._c10d_functional.* and the
// DTensor/compile stacks built on them work on it. The registry owns it until destroyGroup (see
// registry/group_registry.hpp for the process-wide and rank-local modes).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace hier {

struct GroupOptions {
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // The ranks of the group's members in the job, for messages and topology; empty means 0..size-1.
  std::vector<uint64_t> globalRanks;
  std::string description;
};

// Every member calls this with the same store, size and name, and its own rank. Members meet through
// `store` under the prefix "<name>/", so several groups can share one store. Throws if the name is taken.
c10::intrusive_ptr<c10d::ProcessGroup> createGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   const std::string& name, const GroupOptions& options = {});

// The group registered under `name`: made here, or by torch.distributed (dist.new_group, ...).
c10::intrusive_ptr<c10d::ProcessGroup> resolveGroup(const std::string& name);

// Shuts the group down (queued work finishes first, each within its deadline) and frees the name.
void destroyGroup(const std::string& name);

// Rank-local groups, for jobs whose ranks are threads of one process: each thread then sees only the
// groups it created, under the same names as its siblings (c10d's thread isolation mode, kept in step).
void setThreadIsolationMode(bool enable);

}  // namespace hier
