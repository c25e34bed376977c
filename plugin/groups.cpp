#include "plugin/groups.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "plugin/process_group_hier.hpp"
#include "registry/group_registry.hpp"

namespace hier {

c10::intrusive_ptr<c10d::ProcessGroup> createGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   const std::string& name, const GroupOptions& options) {
  TORCH_CHECK(!name.empty(), "hier: createGroup needs a name: functional collectives find groups by it");
  TORCH_CHECK(store, "hier: cannot create group '", name, "': the store is null");
  TORCH_CHECK(options.globalRanks.empty() || options.globalRanks.size() == size_t(size), "hier: cannot create group '",
              name, "': globalRanks has ", options.globalRanks.size(), " entries for a group of ", size, " ranks");
  const uint64_t incarnation = registry::reserve(name);

  // A group made again under a destroyed one's name meets under fresh keys: the old ones are still there.
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name + "/" + std::to_string(incarnation) + "/", store);
  auto backendOptions = c10::make_intrusive<ProcessGroupHier::Options>(options.timeout);
  backendOptions->group_name = name;
  backendOptions->global_ranks_in_group = options.globalRanks;
  auto backend = c10::make_intrusive<ProcessGroupHier>(prefixed, rank, size, backendOptions);

  auto group = c10::make_intrusive<c10d::ProcessGroup>(prefixed, rank, size);
  // One backend object serves both devices; it routes CUDA tensors itself.
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::CUSTOM, backend);
#ifdef HIER_WITH_CUDA
  group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::CUSTOM, backend);
#endif
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
  group->setGroupName(name);
  group->setGroupDesc(options.description.empty() ? name : options.description);
  try {
    registry::add(name, group);
  } catch (...) {
    group->shutdown();
    throw;
  }
  return group;
}

c10::intrusive_ptr<c10d::ProcessGroup> resolveGroup(const std::string& name) { return registry::resolve(name); }

void destroyGroup(const std::string& name) { registry::destroy(name); }

void setThreadIsolationMode(bool enable) { registry::setThreadIsolationMode(enable); }

}  // namespace hier
