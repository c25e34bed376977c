#include "transport/algorithm_table.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>

#include "transport/algorithms/algorithms.h"
#include "transport/error.h"
#include "transport/hierarchy/host_node_steps.h"
#include "transport/hierarchy/planner.h"
#include "transport/hierarchy/schedules.h"
#include "transport/log.h"
#include "transport/settings.h"
#include "transport/shm/collectives.h"

namespace hier::transport {
namespace {

// ---- when an algorithm applies ------------------------------------------------------------------

bool always(const Shape&) { return true; }
// Only when HIER_ALGORITHMS asks for it.
bool never(const Shape&) { return false; }
// A hierarchy exists (several hosts, one of them with several ranks, HIER_HIERARCHY not 0).
bool layered(const Shape& s) { return s.topology != nullptr && hierarchy::layered(*s.topology); }
// ... and every host holds as many ranks: every rank has a full rail.
bool railed(const Shape& s) { return layered(s) && s.topology->uniform(); }
bool splitRail(const Shape& s) { return railed(s) && s.count >= size_t(s.size); }
bool sharedMemory(const Shape& s) { return s.size > 1 && s.oneHost() && s.arenaReady(); }
bool singleCopy(const Shape& s) { return sharedMemory(s) && s.crossMemoryAttach(); }
// Ring algorithms cut the buffer into one block per rank.
bool oneElementPerRank(const Shape& s) { return s.count >= size_t(s.size); }

// ---- when the default rule wants it (the switch points come from the benchmark) -----------------

bool fromSplitRailMin(const Shape& s) { return s.bytes >= settings().splitRailMinBytes; }
bool fromShmMin(const Shape& s) { return s.bytes >= settings().shmMinBytes; }
// Where the arena did not time one copy slow against two through a slot (NodeArena::singleCopyFast). Scatter
// and all-to-all took one copy at nearly every size measured, 2 and 4 ranks, on both VM kinds seen
// (README, "Algorithms"). Never for the steps of a hierarchical schedule: there a node step that waits
// for its readers holds up the fragments behind it (2 hosts x 2 ranks at 2 Gbit/s: an allgather of 1 or 8
// MiB at 37% and 84-93% of the link in two runs of three, where the slots keep every cell at 95%).
bool singleCopyTimedFast(const Shape& s) { return !s.step && s.singleCopyFast(); }
// Gather with every rank writing its own part into the root's output (write_copy) took 0.49-0.78 of the
// slots' time on 2 ranks and 0.44-1.00 on 4 ranks on the 2 cores: wanted wherever scatter takes one copy.
bool fromShmMinSingleCopyFast(const Shape& s) { return fromShmMin(s) && singleCopyTimedFast(s); }
// Broadcast and allgather with one copy keep every rank until all its readers are done, which lost with
// 4 ranks on the 2 cores (up to 1.7x from 256 KiB): only where every rank has a core of its own. There,
// broadcast's split_copy (the copying shared between the root and its readers) took 0.35-0.72 of the time
// of the default before it at every size from 64 KiB to 16 MiB on 2 ranks (two alternated pairs,
// torch_hier.bench), and allgather's single_copy 0.59-0.87 of the slots' time at 64 KiB-1 MiB, 0.66-0.85
// at 4-16 MiB (four alternated pairs) and 0.70-1.05 at 32-64 MiB (two), where an earlier bound at 2 MiB
// had left the slots.
bool waitedOnCopyWanted(const Shape& s) { return fromShmMin(s) && singleCopyTimedFast(s) && s.coreForEachRank(); }
// Allreduce with one copy each way (single_copy) against the slots, 2 ranks, process_group_bench, eight
// alternated pairs on a VM with 2 MiB of L2 a core: 0.49-0.88 of the slots' time at 4 MiB in every pair,
// 0.58-1.09 at 16 MiB (better in six), but 0.95-1.65 at 1 MiB (worse in four of five) and 0.89-1.44 at
// 64 MiB (worse in six); with 4 ranks on the 2 cores no better anywhere from 256 KiB (two pairs). Its copy
// of a peer's reduced part comes from memory where the slots' chunks stay in the cache, and that stops
// paying once the buffer no longer fits the cache.
constexpr size_t kAllreduceSingleCopyMinBytes = size_t(4) << 20;
constexpr size_t kAllreduceSingleCopyMaxBytes = size_t(16) << 20;
bool allreduceSingleCopyWanted(const Shape& s) {
  return s.bytes >= kAllreduceSingleCopyMinBytes && s.bytes <= kAllreduceSingleCopyMaxBytes &&
         singleCopyTimedFast(s) && s.coreForEachRank();
}
// The root reducing alone from the others' slots (shm_root) took 0.34-0.98 of the time of the slots'
// reduce, which shares the reducing out, at every size from 64 KiB to 64 MiB on 2 ranks, and 0.63-1.25 on
// 4 ranks on the 2 cores (README, "Algorithms"): it copies only the others' inputs, once, and they copy
// the next chunk while the root reduces. The root reduces every input itself, so with more ranks on as
// many cores sharing should win; where is not measured: beyond kReduceAtRootMaxRanks the slots' way stays.
constexpr int kReduceAtRootMaxRanks = 4;
bool fewRanksFromShmMin(const Shape& s) { return fromShmMin(s) && s.size <= kReduceAtRootMaxRanks; }
bool fromAllreduceRingMin(const Shape& s) { return s.bytes >= settings().allreduceRingMinBytes; }
bool fromReduceRingMin(const Shape& s) { return s.bytes >= settings().reduceRingMinBytes; }
bool fromBroadcastChainMin(const Shape& s) { return s.bytes >= settings().broadcastChainMinBytes; }
bool fromAllgatherRingMin(const Shape& s) { return s.bytes >= settings().allgatherRingMinBytes; }

shm::NodeArena& arenaOf(Collective& c) {
  auto* arena = c.group().arena(c.deadline());
  if (arena == nullptr) throw Error(ErrorKind::Internal, "the shared-memory arena is not there");
  return *arena;
}

// ---- the tables ----------------------------------------------------------------------------------

const AllreduceAlgorithm kAllreduce[] = {
    {"split_rail", splitRail, fromSplitRailMin,
     [](Collective& c, const Buffer& data, ReduceOp op) {
       hierarchy::HostNodeSteps node(c);
       hierarchy::allreduceSplitRail(c, node, data, op);
     }},
    {"leaders", layered, always,
     [](Collective& c, const Buffer& data, ReduceOp op) {
       hierarchy::HostNodeSteps node(c);
       hierarchy::allreduceLeaders(c, node, data, op);
     }},
    {"single_copy", singleCopy, allreduceSingleCopyWanted,
     [](Collective& c, const Buffer& data, ReduceOp op) { shm::allreduceSingleCopy(c, arenaOf(c), data, op); }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& data, ReduceOp op) { shm::allreduce(c, arenaOf(c), data, op); }},
    {"ring", oneElementPerRank, fromAllreduceRingMin,
     [](Collective& c, const Buffer& data, ReduceOp op) {
       algorithms::allreduceRing(c, data, op, settings().pipelineChunkBytes);
     }},
    {"recursive_doubling", always, always, algorithms::allreduceRecursiveDoubling},
};

const ReduceAlgorithm kReduce[] = {
    {"rails", railed, always,
     [](Collective& c, const Buffer& in, const Buffer& out, ReduceOp op, int root) {
       hierarchy::HostNodeSteps node(c);
       hierarchy::reduceRails(c, node, in, out, op, root);
     }},
    {"shm_root", sharedMemory, fewRanksFromShmMin,
     [](Collective& c, const Buffer& in, const Buffer& out, ReduceOp op, int root) {
       shm::reduceAtRoot(c, arenaOf(c), in, out, op, root);
     }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& in, const Buffer& out, ReduceOp op, int root) {
       shm::reduce(c, arenaOf(c), in, out, op, root);
     }},
    {"ring", oneElementPerRank, fromReduceRingMin,
     [](Collective& c, const Buffer& in, const Buffer& out, ReduceOp op, int root) {
       algorithms::reduceRing(c, in, out, op, root, settings().pipelineChunkBytes);
     }},
    {"binomial", always, always, algorithms::reduceBinomial},
};

const BroadcastAlgorithm kBroadcast[] = {
    {"rails", railed, always,
     [](Collective& c, const Buffer& data, int root) {
       hierarchy::HostNodeSteps node(c);
       hierarchy::broadcastRails(c, node, data, root);
     }},
    {"split_copy", singleCopy, waitedOnCopyWanted,
     [](Collective& c, const Buffer& data, int root) { shm::broadcastSplitCopy(c, arenaOf(c), data, root); }},
    {"single_copy", singleCopy, never,
     [](Collective& c, const Buffer& data, int root) { shm::broadcastSingleCopy(c, arenaOf(c), data, root); }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& data, int root) { shm::broadcast(c, arenaOf(c), data, root); }},
    {"chain", always, fromBroadcastChainMin,
     [](Collective& c, const Buffer& data, int root) {
       algorithms::broadcastChain(c, data, root, settings().pipelineChunkBytes);
     }},
    {"binomial", always, always, algorithms::broadcastBinomial},
};

const AllgatherAlgorithm kAllgather[] = {
    {"rails", railed, always,
     [](Collective& c, const Buffer& in, const std::vector<Buffer>& outs) {
       hierarchy::HostNodeSteps node(c);
       hierarchy::allgatherRails(c, node, in, outs);
     }},
    {"single_copy", singleCopy, waitedOnCopyWanted,
     [](Collective& c, const Buffer& in, const std::vector<Buffer>& outs) {
       shm::allgatherSingleCopy(c, arenaOf(c), in, outs);
     }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& in, const std::vector<Buffer>& outs) {
       shm::allgather(c, arenaOf(c), in, outs);
     }},
    {"ring", always, fromAllgatherRingMin, algorithms::allgatherRing},
    {"direct", always, always, algorithms::allgatherDirect},
};

const GatherAlgorithm kGather[] = {
    {"write_copy", singleCopy, fromShmMinSingleCopyFast,
     [](Collective& c, const Buffer& in, const std::vector<Buffer>& outs, int root) {
       shm::gatherWriteCopy(c, arenaOf(c), in, outs, root);
     }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& in, const std::vector<Buffer>& outs, int root) {
       shm::gather(c, arenaOf(c), in, outs, root);
     }},
    {"linear", always, always, algorithms::gatherLinear},
};

const ScatterAlgorithm kScatter[] = {
    {"single_copy", singleCopy, fromShmMinSingleCopyFast,
     [](Collective& c, const std::vector<Buffer>& ins, const Buffer& out, int root) {
       shm::scatterSingleCopy(c, arenaOf(c), ins, out, root);
     }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const std::vector<Buffer>& ins, const Buffer& out, int root) {
       shm::scatter(c, arenaOf(c), ins, out, root);
     }},
    {"linear", always, always, algorithms::scatterLinear},
};

const ReduceScatterAlgorithm kReduceScatter[] = {
    {"rails", railed, always,
     [](Collective& c, const std::vector<Buffer>& ins, const Buffer& out, ReduceOp op) {
       hierarchy::HostNodeSteps node(c);
       hierarchy::reduceScatterRails(c, node, ins, out, op);
     }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const std::vector<Buffer>& ins, const Buffer& out, ReduceOp op) {
       shm::reduceScatter(c, arenaOf(c), ins, out, op);
     }},
    {"ring", always, always,
     [](Collective& c, const std::vector<Buffer>& ins, const Buffer& out, ReduceOp op) {
       algorithms::reduceScatterRing(c, ins, out, op, settings().pipelineChunkBytes);
     }},
};

// The ranks of an all-to-all pass different sizes, so nothing size-dependent can choose: on one host
// the arena takes it (by one copy where that was not timed slow), elsewhere pairwise. The carried
// schedules (one message per rail pair, or per host pair) run only when asked: on 2 simulated hosts at
// 2 Gbit/s they were no faster than pairwise from 256 KiB up, rails' 512 KiB-1 MiB took 1.2-1.5x as long
// in half the runs (probably the network waiting on the host's hand-off), and only rails on 4 ranks a
// host was faster below that (16-64 KiB: 1.3-2.0 ms against 2.1-2.5). Every algorithm checks every
// pair's sizes on every rank before any data moves (shareSplitSizes, unless the caller already shared
// them).
const AlltoallAlgorithm kAlltoall[] = {
    {"rails", railed, never,
     [](Collective& c, const std::vector<Buffer>& ins, const std::vector<Buffer>& outs,
        const std::vector<uint64_t>* known) {
       hierarchy::alltoallCarried(c, hierarchy::Carriers::Rails, ins, outs, known);
     }},
    {"leaders", layered, never,
     [](Collective& c, const std::vector<Buffer>& ins, const std::vector<Buffer>& outs,
        const std::vector<uint64_t>* known) {
       hierarchy::alltoallCarried(c, hierarchy::Carriers::Leaders, ins, outs, known);
     }},
    {"single_copy", singleCopy, singleCopyTimedFast,
     [](Collective& c, const std::vector<Buffer>& ins, const std::vector<Buffer>& outs,
        const std::vector<uint64_t>* known) { shm::alltoallSingleCopy(c, arenaOf(c), ins, outs, known); }},
    {"shm", sharedMemory, always,
     [](Collective& c, const std::vector<Buffer>& ins, const std::vector<Buffer>& outs,
        const std::vector<uint64_t>* known) { shm::alltoall(c, arenaOf(c), ins, outs, known); }},
    {"pairwise", always, always, algorithms::alltoallPairwise},
};

const BarrierAlgorithm kBarrier[] = {
    {"dissemination", always, always, algorithms::barrierDissemination},
};

template <typename Table>
std::vector<std::string_view> namesOf(const Table& table) {
  std::vector<std::string_view> names;
  for (const auto& algorithm : table) names.push_back(algorithm.name);
  return names;
}

template <typename Table>
bool appliesIn(const Table& table, CollectiveKind kind, std::string_view name, const Shape& shape) {
  for (const auto& algorithm : table) {
    if (algorithm.name == name) return algorithm.applies(shape);
  }
  throw std::invalid_argument(std::string(toString(kind)) + " has no algorithm '" + std::string(name) + "'");
}

// ---- HIER_ALGORITHMS ----------------------------------------------------------------------------

struct Override {
  CollectiveKind kind;
  std::string name;
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
                     ". Write <collective>=<algorithm>[@<from>-<to>] items separated by ';' (README, "
                     "\"Algorithms\"); every rank must see the same setting";
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
    const std::string collective = trim(item.substr(0, equals));
    Override entry{CollectiveKind::Allreduce, trim(item.substr(equals + 1, at == std::string::npos ? std::string::npos
                                                                                                  : at - equals - 1))};
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

const char* toString(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::Allreduce: return "allreduce";
    case CollectiveKind::Reduce: return "reduce";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Allgather: return "allgather";
    case CollectiveKind::Gather: return "gather";
    case CollectiveKind::Scatter: return "scatter";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Alltoall: return "alltoall";
    case CollectiveKind::Barrier: return "barrier";
  }
  return "unknown";
}

std::span<const AllreduceAlgorithm> allreduceAlgorithms() { return kAllreduce; }
std::span<const ReduceAlgorithm> reduceAlgorithms() { return kReduce; }
std::span<const BroadcastAlgorithm> broadcastAlgorithms() { return kBroadcast; }
std::span<const AllgatherAlgorithm> allgatherAlgorithms() { return kAllgather; }
std::span<const GatherAlgorithm> gatherAlgorithms() { return kGather; }
std::span<const ScatterAlgorithm> scatterAlgorithms() { return kScatter; }
std::span<const ReduceScatterAlgorithm> reduceScatterAlgorithms() { return kReduceScatter; }
std::span<const AlltoallAlgorithm> alltoallAlgorithms() { return kAlltoall; }
std::span<const BarrierAlgorithm> barrierAlgorithms() { return kBarrier; }

std::vector<std::string_view> algorithmNames(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::Allreduce: return namesOf(kAllreduce);
    case CollectiveKind::Reduce: return namesOf(kReduce);
    case CollectiveKind::Broadcast: return namesOf(kBroadcast);
    case CollectiveKind::Allgather: return namesOf(kAllgather);
    case CollectiveKind::Gather: return namesOf(kGather);
    case CollectiveKind::Scatter: return namesOf(kScatter);
    case CollectiveKind::ReduceScatter: return namesOf(kReduceScatter);
    case CollectiveKind::Alltoall: return namesOf(kAlltoall);
    case CollectiveKind::Barrier: return namesOf(kBarrier);
  }
  return {};
}

bool algorithmApplies(CollectiveKind kind, std::string_view name, const Shape& shape) {
  switch (kind) {
    case CollectiveKind::Allreduce: return appliesIn(kAllreduce, kind, name, shape);
    case CollectiveKind::Reduce: return appliesIn(kReduce, kind, name, shape);
    case CollectiveKind::Broadcast: return appliesIn(kBroadcast, kind, name, shape);
    case CollectiveKind::Allgather: return appliesIn(kAllgather, kind, name, shape);
    case CollectiveKind::Gather: return appliesIn(kGather, kind, name, shape);
    case CollectiveKind::Scatter: return appliesIn(kScatter, kind, name, shape);
    case CollectiveKind::ReduceScatter: return appliesIn(kReduceScatter, kind, name, shape);
    case CollectiveKind::Alltoall: return appliesIn(kAlltoall, kind, name, shape);
    case CollectiveKind::Barrier: return appliesIn(kBarrier, kind, name, shape);
  }
  return false;
}

std::string_view algorithmOverride(CollectiveKind kind, size_t bytes) {
  std::lock_guard<std::mutex> lock(overridesMutex);
  const Overrides& current = overrides();
  if (!current.error.empty()) throw Error(ErrorKind::InvalidUsage, current.error);
  for (const auto& item : current.items) {
    // The name lives in a table, which outlives any setting.
    if (item.kind == kind && bytes >= item.from && bytes < item.to) {
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
                             std::to_string(shape.bytes) + " bytes (" + std::to_string(shape.count) +
                             " elements) on " + std::to_string(shape.size) +
                             " ranks; the default rule chooses there (said once)");
}

}  // namespace hier::transport
