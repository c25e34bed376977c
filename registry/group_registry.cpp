#include "registry/group_registry.hpp"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include "registry/torch_version.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

namespace hier::registry {
namespace {

struct Table {
  std::map<std::string, c10::intrusive_ptr<c10d::ProcessGroup>> groups;
  std::set<std::string> destroyed;
  std::map<std::string, uint64_t> made;  // groups made per name, destroyed ones included
};

struct Registry {
  std::mutex mutex;
  Table processWide;
  std::unordered_map<uint64_t, Table> rankLocal;

  Table& current() {
    auto key = rankKey();
    return key ? rankLocal[*key] : processWide;
  }
};

// Never destroyed: groups nobody destroyed must not be shut down by static destructors running in an
// unknown order at exit (UCX's and torch's state may be gone by then); the process's end reclaims them.
Registry& theRegistry() {
  static auto* registry = new Registry;
  return *registry;
}

std::string scope() {
  return rankKey() ? "this rank (thread isolation mode: each thread is a rank with names of its own)" : "this process";
}

std::string known(const Table& table) {
  if (table.groups.empty()) return "none";
  std::string text;
  for (auto& [name, group] : table.groups) text += (text.empty() ? "'" : ", '") + name + "'";
  return text;
}

// A group torch.distributed registered with c10d, if there is a live one under `name`.
c10::intrusive_ptr<c10d::ProcessGroup> resolveInC10d(const std::string& name) {
#if HIER_TORCH_HAS_IS_PROCESS_GROUP_REGISTERED
  if (!c10d::is_process_group_registered(name)) return {};
#endif
  try {
    return c10d::resolve_process_group(name);
  } catch (const c10::Error&) {
    return {};  // registered once, gone now (before torch 2.15 also: never registered)
  }
}

std::atomic<bool> threadIsolation{false};

}  // namespace

void setThreadIsolationMode(bool enable) {
  c10d::set_thread_isolation_mode(enable);
  threadIsolation.store(enable);
}

bool threadIsolationMode() { return threadIsolation.load(); }

std::optional<uint64_t> rankKey() {
  if (!threadIsolation.load()) return std::nullopt;
  // As c10d's RankLocal does: autograd's threads act for the thread that ran the forward pass.
  const auto node = torch::autograd::get_current_node();
  return node == nullptr ? at::RecordFunction::currentThreadId() : node->thread_id();
}

namespace {

void checkFree(const Table& table, const std::string& name) {
  TORCH_CHECK(!name.empty(), "hier: a group needs a non-empty name to be registered");
  TORCH_CHECK(!table.groups.count(name), "hier: cannot create group '", name, "': a group of that name exists ",
              "already in ", scope(), "; destroy it first (hier::destroyGroup, torch_hier.destroy_group) or choose ",
              "another name");
  TORCH_CHECK(!resolveInC10d(name), "hier: cannot create group '", name, "': torch.distributed already has a group ",
              "of that name in ", scope(), "; choose another name");
}

}  // namespace

uint64_t reserve(const std::string& name) {
  auto& registry = theRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  Table& table = registry.current();
  checkFree(table, name);
  return table.made[name]++;
}

void add(const std::string& name, const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  TORCH_CHECK(group, "hier: cannot register group '", name, "': the group is null");
  auto& registry = theRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  Table& table = registry.current();
  checkFree(table, name);
  // A dead group may still hold the name in c10d (checkFree saw no live one): make room.
#if HIER_TORCH_HAS_IS_PROCESS_GROUP_REGISTERED
  if (c10d::is_process_group_registered(name)) c10d::unregister_process_group(name);
#else
  c10d::unregister_process_group(name);  // erases the name, if c10d holds it
#endif
  c10d::register_process_group(name, group);
  table.groups.emplace(name, group);
  table.destroyed.erase(name);
}

c10::intrusive_ptr<c10d::ProcessGroup> resolve(const std::string& name) {
  auto& registry = theRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  Table& table = registry.current();
  if (auto it = table.groups.find(name); it != table.groups.end()) return it->second;
  if (auto group = resolveInC10d(name)) return group;
  TORCH_CHECK(!table.destroyed.count(name), "hier: group '", name, "' was destroyed; create it again to use ",
              "the name");
  TORCH_CHECK(false, "hier: no group named '", name, "' in ", scope(), " (hier's groups: ", known(table),
              "); create it first (hier::createGroup, torch_hier.create_group), or pass the name a ",
              "torch.distributed group reports as group.group_name");
}

void destroy(const std::string& name) {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  {
    auto& registry = theRegistry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    Table& table = registry.current();
    auto it = table.groups.find(name);
    if (it == table.groups.end()) {
      TORCH_CHECK(!table.destroyed.count(name), "hier: cannot destroy group '", name, "': it was destroyed already");
      TORCH_CHECK(!resolveInC10d(name), "hier: cannot destroy group '", name, "': torch.distributed made it; ",
                  "destroy it with torch.distributed.destroy_process_group(group)");
      TORCH_CHECK(false, "hier: cannot destroy group '", name, "': no group of that name in ", scope(),
                  " (hier's groups: ", known(table), ")");
    }
    group = std::move(it->second);
    table.groups.erase(it);
    table.destroyed.insert(name);
    c10d::unregister_process_group(name);
  }
  // Outside the lock: shutting down waits for the group's queued work, which may resolve names.
  group->shutdown();
}

std::vector<std::string> names() {
  auto& registry = theRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  std::vector<std::string> result;
  for (auto& [name, group] : registry.current().groups) result.push_back(name);
  return result;
}

}  // namespace hier::registry
