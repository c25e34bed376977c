#include "transport/select/algorithm_table.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>

#include "transport/base/log.h"
#include "transport/base/settings.h"

namespace hier::transport {

// ---- the hierarchical schedules, each in a file of its own (hierarchy/) ---------------------------
// Each runs as part of collective `c` on the whole group: its network steps on c's rail (or leaders)
// group over host memory, its node steps and staging through `node` (node_steps.h), which also decides
// where the buffers live. `premultiply` is PREMUL_SUM's factor (op SUM), when the caller has not
// applied it.
namespace hierarchy {
void allreduceSplitRail(Collective& c, NodeSteps& node, const Buffer& data, ReduceOp op,
                        std::optional<double> premultiply);
void allreduceLeaders(Collective& c, NodeSteps& node, const Buffer& data, ReduceOp op,
                      std::optional<double> premultiply);
void reduceRails(Collective& c, NodeSteps& node, const Buffer& input, const Buffer& output, ReduceOp op, int root,
                 std::optional<double> premultiply);
void broadcastSplitRail(Collective& c, NodeSteps& node, const Buffer& data, int root);
void broadcastRails(Collective& c, NodeSteps& node, const Buffer& data, int root);
void allgatherRails(Collective& c, NodeSteps& node, const Buffer& input, const std::vector<Buffer>& outputs);
void reduceScatterRails(Collective& c, NodeSteps& node, const std::vector<Buffer>& inputs, const Buffer& output,
                        ReduceOp op, std::optional<double> premultiply);
// All-to-all across hosts, host memory only: the parts for another host travel in one message per pair
// of carriers, the rails' or the hosts' first ranks (alltoall_carried.cpp).
void alltoallRails(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                   const std::vector<uint64_t>* known);
void alltoallLeaders(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                     const std::vector<uint64_t>* known);
}  // namespace hierarchy

namespace {

// ---- when a row applies -------------------------------------------------------------------------

// A hierarchy exists: several hosts, one of them with several ranks, and HIER_HIERARCHY is not 0.
bool layered(const Shape& s) {
  return settings().hierarchy && s.topology != nullptr && s.topology->nodeCount() > 1 &&
         s.topology->nodeCount() < s.size;
}
// A schedule's node steps take the buffers: host memory, or one tensor that NCCL takes.
bool nodeStepsTake(const Shape& s) { return s.memory == MemoryType::Host || (s.ncclTakes && s.tensors == 1); }
bool scheduled(const Shape& s) { return layered(s) && nodeStepsTake(s); }
// ... and every host holds as many ranks: every rank has a full rail.
bool railed(const Shape& s) { return scheduled(s) && s.topology->uniform(); }
bool splitRail(const Shape& s) { return railed(s) && s.count >= size_t(s.size); }
// All-to-all's carried schedules (host memory only).
bool carriedOnRails(const Shape& s) { return layered(s) && s.topology->uniform(); }
// NCCL over the whole group needs it on one host.
bool ncclOnOneHost(const Shape& s) { return s.ncclTakes && s.oneHost(); }

bool fromSplitRailMin(const Shape& s) { return s.bytes >= settings().splitRailMinBytes; }

// A table: `rows`, then the group's own (flat_table.h).
template <typename R, typename F>
std::vector<R> withFlatRows(std::initializer_list<R> rows, std::span<const F> flat) {
  std::vector<R> table(rows);
  for (const auto& row : flat) table.push_back(R{row.name, Road::Host, row.applies, row.preferred, row.run});
  return table;
}

template <typename Table>
std::vector<std::string_view> namesOf(const Table& table, std::optional<MemoryType> memory) {
  std::vector<std::string_view> names;
  for (const auto& row : table) {
    if (!memory || row.serves(*memory)) names.push_back(row.name);
  }
  return names;
}

template <typename Table>
bool appliesIn(const Table& table, CollectiveKind kind, std::string_view name, const Shape& shape) {
  for (const auto& row : table) {
    if (row.name == name) return row.serves(shape.memory) && row.applies(shape);
  }
  throw std::invalid_argument(std::string(toString(kind)) + " has no algorithm '" + std::string(name) + "'");
}

// ---- HIER_ALGORITHMS ----------------------------------------------------------------------------

struct Override {
  CollectiveKind kind;
  std::string name;
  std::optional<MemoryType> memory;  // cpu: or cuda:, or none for either
  size_t from = 0;
  size_t to = SIZE_MAX;  // excluded
};

struct Overrides {
  std::vector<Override> items;
  std::string error;  // why the setting could not be read; every collective then fails with it
};

std::string joined(const std::vector<std::string_view>& names) {
  std::string text;
  for (auto name : names) text += (text.empty() ? "" : ", ") + std::string(name);
  return text;
}

Overrides parse(const std::string& text) {
  Overrides result;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(";,", start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.find_first_not_of(" \t") == std::string::npos) continue;
    auto fail = [&](const std::string& why) {
      result.items.clear();
      result.error = "HIER_ALGORITHMS cannot be read at '" + item + "': " + why +
                     ". Write [cpu:|cuda:]<collective>=<algorithm>[@<from>-<to>] items separated by ';' "
                     "(docs/algorithms.md); every rank must see the same setting";
      return result;
    };
    const size_t equals = item.find('=');
    if (equals == std::string::npos) return fail("no '='");
    const size_t at = item.find('@', equals);
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(" \t"));
      s.erase(s.find_last_not_of(" \t") + 1);
      return s;
    };
    std::string collective = trim(item.substr(0, equals));
    std::optional<MemoryType> memory;
    if (const size_t colon = collective.find(':'); colon != std::string::npos) {
      const std::string device = trim(collective.substr(0, colon));
      if (device == "cpu")
        memory = MemoryType::Host;
      else if (device == "cuda")
        memory = MemoryType::Cuda;
      else
        return fail("'" + device + ":' names no memory; write cpu: or cuda:, or nothing for either");
      collective = trim(collective.substr(colon + 1));
    }
    Override entry{CollectiveKind::Allreduce,
                   trim(item.substr(equals + 1, at == std::string::npos ? std::string::npos : at - equals - 1)),
                   memory};
    bool known = false;
    std::string kinds;
    for (auto kind : kCollectiveKinds) {
      kinds += (kinds.empty() ? "" : ", ") + std::string(toString(kind));
      if (collective == toString(kind)) entry.kind = kind, known = true;
    }
    if (!known) return fail("there is no collective '" + collective + "' (there are: " + kinds + ")");
    const auto names = algorithmNames(entry.kind);
    if (std::find(names.begin(), names.end(), entry.name) == names.end()) {
      return fail(collective + " has no algorithm '" + entry.name + "' (it has: " + joined(names) + ")");
    }
    if (entry.memory) {
      const auto serving = algorithmNames(entry.kind, entry.memory);
      if (std::find(serving.begin(), serving.end(), entry.name) == serving.end()) {
        return fail(entry.name + " cannot serve " + (*entry.memory == MemoryType::Cuda ? "CUDA" : "CPU") +
                    " tensors (for those, " + collective + " has: " + joined(serving) + ")");
      }
    }
    if (at != std::string::npos) {
      if (entry.kind == CollectiveKind::Alltoall) {
        return fail("all-to-all takes no size range: its ranks pass different sizes, and must all choose alike");
      }
      const std::string range = trim(item.substr(at + 1));
      const size_t dash = range.find('-');
      if (dash == std::string::npos) return fail("a size range is <from>-<to>, either left out, such as 64K- or -1M");
      try {
        if (dash > 0) entry.from = parseBytes(trim(range.substr(0, dash)), "a size range's start");
        if (dash + 1 < range.size()) entry.to = parseBytes(trim(range.substr(dash + 1)), "a size range's end");
      } catch (const std::exception& error) {
        return fail(error.what());
      }
      if (entry.from >= entry.to) return fail("the range is empty");
    }
    result.items.push_back(std::move(entry));
  }
  return result;
}

std::mutex overridesMutex;

Overrides& overrides() {
  static Overrides current = [] {
    const char* text = std::getenv("HIER_ALGORITHMS");
    return parse(text != nullptr ? text : "");
  }();
  return current;
}

}  // namespace

bool serves(Road road, MemoryType memory) {
  switch (road) {
    case Road::Host: return memory == MemoryType::Host;
    case Road::Schedule: return true;
    case Road::Nccl:
    case Road::Staged: return memory == MemoryType::Cuda;
  }
  return false;
}

// ---- the tables ----------------------------------------------------------------------------------

std::span<const AllreduceRow> allreduceTable() {
  static const std::vector<AllreduceRow> rows = withFlatRows<AllreduceRow>(
      {
          {"split_rail", Road::Schedule, splitRail, fromSplitRailMin, nullptr, hierarchy::allreduceSplitRail},
          {"leaders", Road::Schedule, scheduled, always, nullptr, hierarchy::allreduceLeaders},
          {"nccl", Road::Nccl, ncclOnOneHost, always},
          {"staged", Road::Staged, always, always},
      },
      flatAllreduceRows());
  return rows;
}

std::span<const ReduceRow> reduceTable() {
  static const std::vector<ReduceRow> rows = withFlatRows<ReduceRow>(
      {
          {"rails", Road::Schedule, railed, always, nullptr, hierarchy::reduceRails},
          {"nccl", Road::Nccl, ncclOnOneHost, always},
          {"staged", Road::Staged, always, always},
      },
      flatReduceRows());
  return rows;
}

std::span<const BroadcastRow> broadcastTable() {
  static const std::vector<BroadcastRow> rows = withFlatRows<BroadcastRow>(
      {
          {"split_rail", Road::Schedule, splitRail, fromSplitRailMin, nullptr, hierarchy::broadcastSplitRail},
          {"rails", Road::Schedule, railed, always, nullptr, hierarchy::broadcastRails},
          {"nccl", Road::Nccl, ncclOnOneHost, always},
          {"staged", Road::Staged, always, always},
      },
      flatBroadcastRows());
  return rows;
}

std::span<const AllgatherRow> allgatherTable() {
  static const std::vector<AllgatherRow> rows = withFlatRows<AllgatherRow>(
      {
          {"rails", Road::Schedule, railed, always, nullptr, hierarchy::allgatherRails},
          {"nccl", Road::Nccl, ncclOnOneHost, always},
          {"staged", Road::Staged, always, always},
      },
      flatAllgatherRows());
  return rows;
}

std::span<const GatherRow> gatherTable() {
  static const std::vector<GatherRow> rows = withFlatRows<GatherRow>(
      {
          {"nccl", Road::Nccl, ncclOnOneHost, always},
          {"staged", Road::Staged, always, always},
      },
      flatGatherRows());
  return rows;
}

std::span<const ScatterRow> scatterTable() {
  static const std::vector<ScatterRow> rows = withFlatRows<ScatterRow>(
      {
          {"nccl", Road::Nccl, ncclOnOneHost, always},
          {"staged", Road::Staged, always, always},
      },
      flatScatterRows());
  return rows;
}

std::span<const ReduceScatterRow> reduceScatterTable() {
  static const std::vector<ReduceScatterRow> rows = withFlatRows<ReduceScatterRow>(
      {
          {"rails", Road::Schedule, railed, always, nullptr, hierarchy::reduceScatterRails},
          {"nccl", Road::Nccl, ncclOnOneHost, always},
          {"staged", Road::Staged, always, always},
      },
      flatReduceScatterRows());
  return rows;
}

// The carried schedules run only when asked: on 2 simulated hosts they were no faster than pairwise
// from 256 KiB up, and only rails on 4 ranks a host was faster below that (docs/algorithms.md).
std::span<const AlltoallRow> alltoallTable() {
  static const std::vector<AlltoallRow> rows = withFlatRows<AlltoallRow>(
      {
          {"rails", Road::Host, carriedOnRails, never, hierarchy::alltoallRails},
          {"leaders", Road::Host, layered, never, hierarchy::alltoallLeaders},
          {"nccl", Road::Nccl, ncclOnOneHost, always},
          {"staged", Road::Staged, always, always},
      },
      flatAlltoallRows());
  return rows;
}

std::span<const BarrierRow> barrierTable() {
  static const std::vector<BarrierRow> rows = withFlatRows<BarrierRow>(
      {
          {"nccl", Road::Nccl, ncclOnOneHost, always},
          {"staged", Road::Staged, always, always},
      },
      flatBarrierRows());
  return rows;
}

std::vector<std::string_view> algorithmNames(CollectiveKind kind, std::optional<MemoryType> memory) {
  switch (kind) {
    case CollectiveKind::Allreduce: return namesOf(allreduceTable(), memory);
    case CollectiveKind::Reduce: return namesOf(reduceTable(), memory);
    case CollectiveKind::Broadcast: return namesOf(broadcastTable(), memory);
    case CollectiveKind::Allgather: return namesOf(allgatherTable(), memory);
    case CollectiveKind::Gather: return namesOf(gatherTable(), memory);
    case CollectiveKind::Scatter: return namesOf(scatterTable(), memory);
    case CollectiveKind::ReduceScatter: return namesOf(reduceScatterTable(), memory);
    case CollectiveKind::Alltoall: return namesOf(alltoallTable(), memory);
    case CollectiveKind::Barrier: return namesOf(barrierTable(), memory);
  }
  return {};
}

bool algorithmApplies(CollectiveKind kind, std::string_view name, const Shape& shape) {
  switch (kind) {
    case CollectiveKind::Allreduce: return appliesIn(allreduceTable(), kind, name, shape);
    case CollectiveKind::Reduce: return appliesIn(reduceTable(), kind, name, shape);
    case CollectiveKind::Broadcast: return appliesIn(broadcastTable(), kind, name, shape);
    case CollectiveKind::Allgather: return appliesIn(allgatherTable(), kind, name, shape);
    case CollectiveKind::Gather: return appliesIn(gatherTable(), kind, name, shape);
    case CollectiveKind::Scatter: return appliesIn(scatterTable(), kind, name, shape);
    case CollectiveKind::ReduceScatter: return appliesIn(reduceScatterTable(), kind, name, shape);
    case CollectiveKind::Alltoall: return appliesIn(alltoallTable(), kind, name, shape);
    case CollectiveKind::Barrier: return appliesIn(barrierTable(), kind, name, shape);
  }
  return false;
}

std::string_view algorithmOverride(CollectiveKind kind, MemoryType memory, size_t bytes) {
  std::lock_guard<std::mutex> lock(overridesMutex);
  const Overrides& current = overrides();
  if (!current.error.empty()) throw Error(ErrorKind::InvalidUsage, current.error);
  for (const auto& item : current.items) {
    // The name lives in a table, which outlives any setting.
    if (item.kind == kind && (!item.memory || *item.memory == memory) && bytes >= item.from && bytes < item.to) {
      for (auto name : algorithmNames(kind)) {
        if (name == item.name) return name;
      }
    }
  }
  return {};
}

void setAlgorithms(const std::string& text) {
  Overrides parsed = parse(text);
  if (!parsed.error.empty()) throw Error(ErrorKind::InvalidUsage, parsed.error);
  std::lock_guard<std::mutex> lock(overridesMutex);
  overrides() = std::move(parsed);
}

void noteOverridePassedOver(CollectiveKind kind, std::string_view name, const Shape& shape) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::string what = std::string(toString(kind)) + "=" + std::string(name);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!said.insert(what).second) return;
  }
  log(LogLevel::Warning, "HIER_ALGORITHMS asks for " + what + ", which does not apply to a call of " +
                             std::to_string(shape.bytes) + " bytes (" + std::to_string(shape.count) + " elements) on " +
                             std::to_string(shape.size) + " ranks; the default rule chooses there (said once)");
}

void overrideCannotServe(CollectiveKind kind, std::string_view name, MemoryType memory) {
  const bool cuda = memory == MemoryType::Cuda;
  std::string rows;
  for (auto row : algorithmNames(kind, memory)) rows += (rows.empty() ? "" : ", ") + std::string(row);
  throw Error(ErrorKind::InvalidUsage, "HIER_ALGORITHMS asks for " + std::string(toString(kind)) + "=" +
                                           std::string(name) + ", which cannot " + "serve " + (cuda ? "CUDA" : "CPU") +
                                           " tensors (for those, " + toString(kind) + " has: " + rows +
                                           "); name the memory an item is for, such as '" + (cuda ? "cpu:" : "cuda:") +
                                           toString(kind) + "=" + std::string(name) + "'");
}

}  // namespace hier::transport
