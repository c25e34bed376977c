// Named groups: the process groups hier made from C++, owned and findable by name.
//
// torch's functional collectives (torch.ops._c10d_functional.*) find a group by the name they are given,
// in c10d's GroupRegistry, which only holds weak references. This registry owns the groups created
// through hier::createGroup, mirrors each into c10d's registry under the same name, and destroys them on
// request. Lookups also see the groups torch.distributed made from Python (dist.new_group and the like),
// which Python registers with c10d itself.
//
// Two modes: process-wide, where every thread sees the same names, and rank-local, where each thread is
// a rank with names of its own (autograd's threads see the names of the thread whose forward pass they
// run). setThreadIsolationMode switches this registry and c10d's together; libtorch does not export a
// way to read c10d's mode, so switch it here rather than with c10d::set_thread_isolation_mode.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <optional>
#include <string>
#include <vector>

namespace hier::registry {

// Before making a group called `name`: throws if a live group has that name already, here or in c10d's
// registry; otherwise returns how many groups of that name this rank made before. Every member makes and
// destroys the same groups in the same order, so the count agrees across members: it keeps a remade
// group's store keys apart from those its predecessor left behind.
uint64_t reserve(const std::string& name);

// Registers `group` under `name`, owned by this registry until destroy(name). Throws if a live group has
// that name already, here or in c10d's registry.
void add(const std::string& name, const c10::intrusive_ptr<c10d::ProcessGroup>& group);

// The group registered under `name`, by hier or by torch.distributed. Throws, saying which, if no group
// ever had that name or if it was destroyed.
c10::intrusive_ptr<c10d::ProcessGroup> resolve(const std::string& name);

// Unregisters the group (here and in c10d) and shuts it down: pending work ends, its resources go.
// Only groups added here can be destroyed here; torch.distributed's go with dist.destroy_process_group.
void destroy(const std::string& name);

// The names this registry owns (in the current mode and, in rank-local mode, for the current rank).
std::vector<std::string> names();

// Rank-local (true) or process-wide (false, the default), for this registry and c10d's. Groups
// registered in one mode are not seen in the other.
void setThreadIsolationMode(bool enable);
bool threadIsolationMode();

// In rank-local mode, the current rank's key (its forward thread); nullopt in process-wide mode.
std::optional<uint64_t> rankKey();

}  // namespace hier::registry
