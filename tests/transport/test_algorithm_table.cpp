// The algorithm tables: the default rule's choices and HIER_ALGORITHMS, as pure functions; then every
// algorithm of every table, forced in turn, at odd sizes on one host (3 and 5 ranks) and on layouts of
// simulated hosts, against values computed locally. The loop reads the tables, so a new algorithm is
// tested as soon as it has its row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/transport/multiprocess.h"
#include "tests/transport/values.h"
#include "transport/arena/node_arena.h"
#include "transport/base/error.h"
#include "transport/base/settings.h"
#include "transport/group/collective.h"
#include "transport/group/group.h"
#include "transport/select/algorithm_table.h"
#include "transport/select/dispatch.h"
#include "transport/topology/topology.h"

namespace hier::transport {
namespace {

using testing::RankContext;
using testing::runRanks;
using testing::value;
using testing::view;

constexpr std::chrono::milliseconds kTimeout{20000};

Topology topologyOf(const std::string& layout, int rank = 0) {
  std::vector<std::string> hosts;
  for (char c : layout) hosts.push_back(std::string("host-") + c);
  return Topology::fromHosts(hosts, rank);
}

Shape shapeOf(const Topology& topology, size_t bytes, size_t count, bool arena = true) {
  Shape shape{bytes, count, topology.size(), &topology};
  shape.arenaReady = [arena] { return arena; };
  shape.crossMemoryAttach = [arena] { return arena; };
  return shape;
}

template <typename Row>
std::string_view chosen(CollectiveKind kind, std::span<const Row> table, const Shape& shape) {
  return choose(kind, table, shape).name;
}

std::string joined(const std::vector<std::string_view>& names) {
  std::string text;
  for (auto name : names) text += (text.empty() ? "" : ", ") + std::string(name);
  return text;
}

TEST(AlgorithmTable, EveryTableEndsWithAnAlgorithmThatAlwaysApplies) {
  const Topology one = topologyOf("A");
  for (auto kind : kCollectiveKinds) {
    const auto names = algorithmNames(kind, MemoryType::Host);
    ASSERT_FALSE(names.empty()) << toString(kind);
    for (const std::string layout : {"A", "AAA", "AAB", "ABAB"}) {
      const Topology t = topologyOf(layout);
      for (size_t count : {size_t(0), size_t(1), size_t(1) << 20}) {
        EXPECT_TRUE(algorithmApplies(kind, names.back(), shapeOf(t, count * 4, count, false)))
            << toString(kind) << " " << names.back() << " on " << layout << " x" << count;
      }
    }
  }
  EXPECT_THROW(algorithmApplies(CollectiveKind::Allreduce, "fastest", shapeOf(one, 8, 2)), std::invalid_argument);
}

// At the switch points of the settings in force (a test variant moves HIER_SHM_MIN_BYTES).
TEST(AlgorithmTable, TheDefaultRuleKeepsTheBenchmarksSwitchPoints) {
  const Settings& set = settings();
  const Topology host = topologyOf("AA"), layered = topologyOf("AABB"), uneven = topologyOf("AAB");
  const auto allreduce = allreduceTable();
  auto at = [](const Topology& t, size_t bytes, bool arena = true) { return shapeOf(t, bytes, bytes / 4, arena); };
  const size_t below = std::min({set.shmMinBytes, set.allreduceRingMinBytes, set.splitRailMinBytes}) - 4;
  EXPECT_EQ(chosen(CollectiveKind::Allreduce, allreduce, at(host, below)), "recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::Allreduce, allreduce, at(host, set.shmMinBytes)), "shm");
  // Without an arena (one that could not be set up): UCX's ring from its switch point.
  EXPECT_EQ(chosen(CollectiveKind::Allreduce, allreduce, at(host, set.allreduceRingMinBytes, false)), "ring");
  EXPECT_EQ(chosen(CollectiveKind::Allreduce, allreduce, at(layered, set.splitRailMinBytes)), "split_rail");
  EXPECT_EQ(chosen(CollectiveKind::Allreduce, allreduce, at(layered, below)), "leaders");
  EXPECT_EQ(chosen(CollectiveKind::Allreduce, allreduce, at(uneven, set.splitRailMinBytes)), "leaders");
  // A ring needs an element per rank: 3 wide elements over 4 ranks are not enough.
  EXPECT_EQ(
      chosen(CollectiveKind::Allreduce, allreduce, shapeOf(topologyOf("AAAA"), set.allreduceRingMinBytes, 3, false)),
      "recursive_doubling");

  const auto broadcast = broadcastTable();
  EXPECT_EQ(chosen(CollectiveKind::Broadcast, broadcast, at(host, set.broadcastChainMinBytes, false)), "chain");
  EXPECT_EQ(chosen(CollectiveKind::Broadcast, broadcast, at(host, set.broadcastChainMinBytes - 4, false)), "binomial");
  EXPECT_EQ(chosen(CollectiveKind::Broadcast, broadcast, at(layered, 8)), "rails");
  // From the split-rail switch point every rail carries a part (one network device per local rank).
  EXPECT_EQ(chosen(CollectiveKind::Broadcast, broadcast, at(layered, set.splitRailMinBytes)), "split_rail");
  EXPECT_EQ(chosen(CollectiveKind::Broadcast, broadcast, at(uneven, set.splitRailMinBytes, false)),
            set.splitRailMinBytes >= set.broadcastChainMinBytes ? "chain" : "binomial");  // no full rails
  EXPECT_EQ(chosen(CollectiveKind::Reduce, reduceTable(), at(uneven, set.reduceRingMinBytes, false)), "ring");
  EXPECT_EQ(
      chosen(CollectiveKind::Reduce, reduceTable(), at(host, std::min(set.shmMinBytes, set.reduceRingMinBytes) - 4)),
      "binomial");
  // On one host the root reduces from the others' slots, up to 4 ranks; beyond, the slots share the reducing.
  EXPECT_EQ(chosen(CollectiveKind::Reduce, reduceTable(), at(host, set.shmMinBytes)), "shm_root");
  EXPECT_EQ(chosen(CollectiveKind::Reduce, reduceTable(), at(topologyOf("AAAA"), set.shmMinBytes)), "shm_root");
  EXPECT_EQ(chosen(CollectiveKind::Reduce, reduceTable(), at(topologyOf("AAAAA"), set.shmMinBytes)), "shm");
  EXPECT_EQ(chosen(CollectiveKind::Allgather, allgatherTable(), at(host, set.allgatherRingMinBytes, false)), "ring");
  EXPECT_EQ(chosen(CollectiveKind::Allgather, allgatherTable(),
                   at(host, std::min(set.shmMinBytes, set.allgatherRingMinBytes) - 4)),
            "direct");
  EXPECT_EQ(chosen(CollectiveKind::ReduceScatter, reduceScatterTable(), at(layered, 8)), "rails");
  EXPECT_EQ(chosen(CollectiveKind::ReduceScatter, reduceScatterTable(), at(host, 8)), "ring");
  // All-to-all has no size to choose by: on one host the arena whenever there is one, else pairwise;
  // the carried schedules only when asked.
  EXPECT_EQ(chosen(CollectiveKind::Alltoall, alltoallTable(), shapeOf(host, 0, 0)), "shm");
  EXPECT_EQ(chosen(CollectiveKind::Alltoall, alltoallTable(), shapeOf(layered, 0, 0)), "pairwise");
  EXPECT_EQ(chosen(CollectiveKind::Alltoall, alltoallTable(), shapeOf(uneven, 0, 0)), "pairwise");
  EXPECT_EQ(chosen(CollectiveKind::Alltoall, alltoallTable(), shapeOf(topologyOf("AB"), 0, 0)), "pairwise");

  // Where the arena did not time one copy slow (NodeArena::singleCopyFast), scatter and gather from the
  // arena's switch point and every all-to-all on one host take it; where every rank has a core of its
  // own, broadcast (split_copy) and allgather too, at every size from the switch point.
  auto timedFaster = [](Shape shape, bool faster, bool coreEach = false) {
    shape.singleCopyFast = [faster] { return faster; };
    shape.coreForEachRank = [coreEach] { return coreEach; };
    return shape;
  };
  const auto scatter = scatterTable();
  EXPECT_EQ(chosen(CollectiveKind::Scatter, scatter, timedFaster(at(host, set.shmMinBytes), true)), "single_copy");
  EXPECT_EQ(chosen(CollectiveKind::Scatter, scatter, timedFaster(at(host, set.shmMinBytes), false)), "shm");
  EXPECT_EQ(chosen(CollectiveKind::Scatter, scatter, timedFaster(at(host, set.shmMinBytes - 4), true)), "linear");
  const auto gather = gatherTable();
  for (bool coreEach : {true, false}) {
    EXPECT_EQ(chosen(CollectiveKind::Gather, gather, timedFaster(at(host, set.shmMinBytes), true, coreEach)),
              "write_copy");
    EXPECT_EQ(chosen(CollectiveKind::Gather, gather, timedFaster(at(host, 4 * set.shmMinBytes), true, coreEach)),
              "write_copy");
  }
  EXPECT_EQ(chosen(CollectiveKind::Gather, gather, timedFaster(at(host, set.shmMinBytes), false)), "shm");
  EXPECT_EQ(chosen(CollectiveKind::Gather, gather, timedFaster(at(host, set.shmMinBytes - 4), true)), "linear");
  EXPECT_EQ(chosen(CollectiveKind::Alltoall, alltoallTable(), timedFaster(shapeOf(host, 0, 0), true)), "single_copy");
  EXPECT_EQ(chosen(CollectiveKind::Alltoall, alltoallTable(), timedFaster(shapeOf(layered, 0, 0), true)), "pairwise");
  const auto allgather = allgatherTable();
  for (size_t bytes : {set.shmMinBytes - 4, set.shmMinBytes, size_t(64) << 10, size_t(2) << 20, size_t(64) << 20}) {
    for (bool coreEach : {true, false}) {
      for (bool faster : {true, false}) {
        const Shape shape = timedFaster(at(host, bytes), faster, coreEach);
        const bool expected = bytes >= set.shmMinBytes && coreEach && faster;
        EXPECT_EQ(chosen(CollectiveKind::Broadcast, broadcast, shape) == "split_copy", expected) << bytes;
        EXPECT_EQ(chosen(CollectiveKind::Allgather, allgather, shape) == "single_copy", expected) << bytes;
      }
    }
  }
  // Nor in the steps of a hierarchical schedule, whose pipeline a step that waits for its readers holds up.
  for (size_t bytes : {set.shmMinBytes, size_t(1) << 20}) {
    Shape step = timedFaster(at(host, bytes), true, true);
    step.step = true;
    EXPECT_NE(chosen(CollectiveKind::Broadcast, broadcast, step), "split_copy") << bytes;
    EXPECT_NE(chosen(CollectiveKind::Gather, gather, step), "write_copy") << bytes;
    EXPECT_NE(chosen(CollectiveKind::Allgather, allgather, step), "single_copy") << bytes;
    EXPECT_NE(chosen(CollectiveKind::Scatter, scatter, step), "single_copy") << bytes;
    EXPECT_NE(chosen(CollectiveKind::Alltoall, alltoallTable(), step), "single_copy") << bytes;
  }
  // Without cross-memory attach the timing cannot have said so; were it to, the slots still run.
  Shape noAttach = timedFaster(at(host, set.shmMinBytes), true, true);
  noAttach.crossMemoryAttach = [] { return false; };
  EXPECT_EQ(chosen(CollectiveKind::Scatter, scatter, noAttach), "shm");
}

TEST(AlgorithmTable, HierAlgorithmsOverridesPerCollectiveAndSizeRange) {
  setAlgorithms("allreduce=ring@64K-; broadcast=binomial@-1M, allreduce=shm@1K-2K ; alltoall=pairwise");
  EXPECT_EQ(algorithmOverride(CollectiveKind::Allreduce, MemoryType::Host, 64 << 10), "ring");
  EXPECT_EQ(algorithmOverride(CollectiveKind::Allreduce, MemoryType::Host, 1500), "shm");
  EXPECT_EQ(algorithmOverride(CollectiveKind::Allreduce, MemoryType::Host, 2048), "");  // `to` is excluded
  EXPECT_EQ(algorithmOverride(CollectiveKind::Broadcast, MemoryType::Host, (1 << 20) - 1), "binomial");
  EXPECT_EQ(algorithmOverride(CollectiveKind::Broadcast, MemoryType::Host, 1 << 20), "");
  EXPECT_EQ(algorithmOverride(CollectiveKind::Reduce, MemoryType::Host, 8), "");
  const Topology host = topologyOf("AA");
  EXPECT_EQ(chosen(CollectiveKind::Allreduce, allreduceTable(), shapeOf(host, 1 << 30, 1 << 28)), "ring");
  EXPECT_EQ(chosen(CollectiveKind::Alltoall, alltoallTable(), shapeOf(host, 0, 0)), "pairwise");

  // One that does not apply to a call leaves it to the default rule.
  setAlgorithms("allreduce=split_rail");
  EXPECT_EQ(chosen(CollectiveKind::Allreduce, allreduceTable(), shapeOf(host, 8, 2)), "recursive_doubling");

  auto refused = [](const std::string& text) {
    try {
      setAlgorithms(text);
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::InvalidUsage);
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused("allreduce=rign")
                .find("allreduce has no algorithm 'rign' (it has: " +
                      joined(algorithmNames(CollectiveKind::Allreduce)) + ")"),
            std::string::npos);
  EXPECT_NE(refused("allreduse=ring").find("there is no collective 'allreduse'"), std::string::npos);
  EXPECT_NE(refused("allreduce").find("no '='"), std::string::npos);
  EXPECT_NE(refused("alltoall=shm@1K-").find("all-to-all takes no size range"), std::string::npos);
  EXPECT_NE(refused("broadcast=chain@1M").find("<from>-<to>"), std::string::npos);
  EXPECT_NE(refused("broadcast=chain@2M-1M").find("the range is empty"), std::string::npos);
  EXPECT_NE(refused("broadcast=chain@lots-").find("byte count"), std::string::npos);
  // A refused setting leaves the last good one in place.
  EXPECT_EQ(algorithmOverride(CollectiveKind::Allreduce, MemoryType::Host, 8), "split_rail");
  setAlgorithms("");
  EXPECT_EQ(algorithmOverride(CollectiveKind::Allreduce, MemoryType::Host, 8), "");
}

// ---- CUDA tensors: the same table ---------------------------------------------------------------

Shape onDevice(const Topology& topology, size_t bytes, bool ncclTakes = true, size_t tensors = 1) {
  Shape shape{bytes, bytes / 4, topology.size(), &topology};
  shape.memory = MemoryType::Cuda;
  shape.ncclTakes = ncclTakes;
  shape.tensors = tensors;
  return shape;
}

std::string_view chosenFor(CollectiveKind kind, const Shape& shape) {
  switch (kind) {
    case CollectiveKind::Allreduce: return chosen(kind, allreduceTable(), shape);
    case CollectiveKind::Reduce: return chosen(kind, reduceTable(), shape);
    case CollectiveKind::Broadcast: return chosen(kind, broadcastTable(), shape);
    case CollectiveKind::Allgather: return chosen(kind, allgatherTable(), shape);
    case CollectiveKind::Gather: return chosen(kind, gatherTable(), shape);
    case CollectiveKind::Scatter: return chosen(kind, scatterTable(), shape);
    case CollectiveKind::ReduceScatter: return chosen(kind, reduceScatterTable(), shape);
    case CollectiveKind::Alltoall: return chosen(kind, alltoallTable(), shape);
    case CollectiveKind::Barrier: return chosen(kind, barrierTable(), shape);
  }
  return {};
}

TEST(AlgorithmTable, CudaTensorsChooseFromTheSameTable) {
  const size_t large = settings().splitRailMinBytes, small = large - 4;
  const Topology one = topologyOf("AAAA"), single = topologyOf("A"), layered = topologyOf("AABB"),
                 uneven = topologyOf("AAB"), apart = topologyOf("ABCD");
  auto allreduce = [](const Topology& t, size_t bytes, bool takes = true, size_t tensors = 1) {
    return chosenFor(CollectiveKind::Allreduce, onDevice(t, bytes, takes, tensors));
  };
  // One host: NCCL over the group (several tensors as one NCCL group), unless NCCL cannot take them
  // (an op or type it lacks; never a rank's own memory layout: the CUDA path makes tensors contiguous).
  EXPECT_EQ(allreduce(one, large), "nccl");
  EXPECT_EQ(allreduce(single, large), "nccl");
  EXPECT_EQ(allreduce(one, large, true, 3), "nccl");
  EXPECT_EQ(allreduce(one, large, false), "staged");
  // Across hosts, the schedules CPU tensors take, their node steps on NCCL: split rail for large
  // buffers on full rails, leaders otherwise.
  EXPECT_EQ(allreduce(layered, large), "split_rail");
  EXPECT_EQ(allreduce(layered, small), "leaders");
  EXPECT_EQ(allreduce(uneven, large), "leaders");
  // No node step to take (one rank a host), NCCL cannot take the node steps, or several tensors (a
  // schedule takes one): staged.
  EXPECT_EQ(allreduce(apart, large), "staged");
  EXPECT_EQ(allreduce(layered, large, false), "staged");
  EXPECT_EQ(allreduce(layered, large, true, 2), "staged");
  for (auto kind :
       {CollectiveKind::Reduce, CollectiveKind::Broadcast, CollectiveKind::Allgather, CollectiveKind::ReduceScatter}) {
    EXPECT_EQ(chosenFor(kind, onDevice(one, large)), "nccl") << toString(kind);
    EXPECT_EQ(chosenFor(kind, onDevice(layered, large)), kind == CollectiveKind::Broadcast ? "split_rail" : "rails")
        << toString(kind);
    EXPECT_EQ(chosenFor(kind, onDevice(uneven, large)), "staged") << toString(kind);  // no full rails
    EXPECT_EQ(chosenFor(kind, onDevice(layered, large, true, 2)), "staged") << toString(kind);
    EXPECT_EQ(chosenFor(kind, onDevice(one, large, false)), "staged") << toString(kind);
  }
  EXPECT_EQ(chosenFor(CollectiveKind::Alltoall, onDevice(one, 0)), "nccl");
  EXPECT_EQ(chosenFor(CollectiveKind::Alltoall, onDevice(layered, 0)), "staged");  // carried: host memory only
  // The barrier: a one-element NCCL allreduce on one host; across hosts the host barrier after the stream.
  EXPECT_EQ(chosenFor(CollectiveKind::Barrier, onDevice(one, 0)), "nccl");
  EXPECT_EQ(chosenFor(CollectiveKind::Barrier, onDevice(layered, 0)), "staged");
  EXPECT_EQ(chosenFor(CollectiveKind::Barrier, onDevice(apart, 0)), "staged");
  // Gather and scatter: NCCL's sends and receives on one host (as ProcessGroupNCCL's), staged across hosts.
  for (auto kind : {CollectiveKind::Gather, CollectiveKind::Scatter}) {
    EXPECT_EQ(chosenFor(kind, onDevice(one, large)), "nccl") << toString(kind);
    EXPECT_EQ(chosenFor(kind, onDevice(layered, large)), "staged") << toString(kind);
  }
}

// The schedules only where a hierarchy exists: several hosts, one of them with several ranks; those of
// rails only where every host has as many ranks.
TEST(AlgorithmTable, HierarchicalSchedulesOnlyWhereAHierarchyExists) {
  const size_t large = size_t(1) << 20;
  auto onHost = [&](CollectiveKind kind, const char* layout) {
    const Topology t = topologyOf(layout);
    return std::string(chosenFor(kind, shapeOf(t, large, large / 4, false)));
  };
  EXPECT_EQ(onHost(CollectiveKind::Allreduce, "AABB"), "split_rail");
  EXPECT_EQ(onHost(CollectiveKind::Allreduce, "AAB"), "leaders");
  EXPECT_EQ(onHost(CollectiveKind::Allreduce, "AAAA"), "ring");  // one host (here without an arena)
  EXPECT_EQ(onHost(CollectiveKind::Allreduce, "ABCD"), "ring");  // one rank a host
  for (auto kind :
       {CollectiveKind::Reduce, CollectiveKind::Broadcast, CollectiveKind::Allgather, CollectiveKind::ReduceScatter}) {
    const char* schedule = kind == CollectiveKind::Broadcast ? "split_rail" : "rails";
    EXPECT_EQ(onHost(kind, "AABB"), schedule) << toString(kind);
    for (const char* flat : {"AAB", "AAAA", "ABCD"}) {
      EXPECT_NE(onHost(kind, flat), "rails") << toString(kind) << " on " << flat;
      EXPECT_NE(onHost(kind, flat), "split_rail") << toString(kind) << " on " << flat;
    }
  }
}

TEST(AlgorithmTable, EachMemoryGetsOnlyTheRowsThatServeIt) {
  for (auto kind : kCollectiveKinds) {
    const auto host = algorithmNames(kind, MemoryType::Host), cuda = algorithmNames(kind, MemoryType::Cuda);
    EXPECT_FALSE(cuda.empty()) << toString(kind);
    for (const std::string layout : {"A", "AAA", "AAB", "AABB", "ABCD"}) {
      const Topology t = topologyOf(layout);
      for (size_t bytes : {size_t(0), size_t(4096), size_t(4) << 20}) {
        for (bool takes : {true, false}) {
          Shape device = onDevice(t, bytes, takes);
          Shape onHost = shapeOf(t, bytes, bytes / 4);
          const auto d = chosenFor(kind, device), h = chosenFor(kind, onHost);
          EXPECT_NE(std::find(cuda.begin(), cuda.end(), d), cuda.end()) << toString(kind) << " " << layout << ": " << d;
          EXPECT_NE(std::find(host.begin(), host.end(), h), host.end()) << toString(kind) << " " << layout << ": " << h;
        }
      }
    }
  }
}

TEST(AlgorithmTable, HierAlgorithmsNamesCudaChoicesToo) {
  const size_t large = settings().splitRailMinBytes;
  const Topology one = topologyOf("AAAA"), layered = topologyOf("AABB");
  const Shape onHost = shapeOf(layered, large, large / 4);
  setAlgorithms("cuda:allreduce=leaders");
  EXPECT_EQ(chosenFor(CollectiveKind::Allreduce, onDevice(layered, large)), "leaders");
  EXPECT_EQ(chosenFor(CollectiveKind::Allreduce, onHost), "split_rail");  // the item is for CUDA tensors
  setAlgorithms("cuda:allreduce=staged");
  EXPECT_EQ(chosenFor(CollectiveKind::Allreduce, onDevice(one, large)), "staged");
  setAlgorithms("cpu:allreduce=ring");
  EXPECT_EQ(chosenFor(CollectiveKind::Allreduce, onDevice(one, large)), "nccl");
  EXPECT_EQ(chosenFor(CollectiveKind::Allreduce, shapeOf(one, large, large / 4, false)), "ring");
  // An item for either memory that names a host algorithm serves CPU tensors and fails CUDA ones,
  // naming the rows that can serve them.
  setAlgorithms("allreduce=ring");
  EXPECT_EQ(chosenFor(CollectiveKind::Allreduce, shapeOf(one, large, large / 4, false)), "ring");
  try {
    chosenFor(CollectiveKind::Allreduce, onDevice(one, large));
    ADD_FAILURE() << "allreduce=ring was taken for CUDA tensors";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidUsage);
    const std::string text = error.what();
    EXPECT_NE(text.find("which cannot serve CUDA tensors (for those, allreduce has: " +
                        joined(algorithmNames(CollectiveKind::Allreduce, MemoryType::Cuda)) + ")"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("'cpu:allreduce=ring'"), std::string::npos) << text;
  }
  // Items for one memory are checked as they are read.
  auto refused = [](const std::string& text) {
    try {
      setAlgorithms(text);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused("cuda:allreduce=ring").find("ring cannot serve CUDA tensors"), std::string::npos);
  EXPECT_NE(refused("cpu:broadcast=nccl").find("nccl cannot serve CPU tensors"), std::string::npos);
  EXPECT_NE(refused("gpu:allreduce=ring").find("'gpu:' names no memory"), std::string::npos);
  setAlgorithms("");
}

// ---- every algorithm, forced, against local values ---------------------------------------------

const std::vector<size_t> kCounts = {1, 7, 1001, 40001};
const std::vector<std::string> kLayouts = {"AAA", "AAAAA", "AAB", "AABB"};

// Runs `kind` once with `name` forced and checks the result. Every rank makes the same calls.
void runForced(Group& group, uint64_t& seq, CollectiveKind kind, std::string_view name, size_t count,
               const std::string& where) {
  const int n = group.size(), me = group.rank();
  setAlgorithms(std::string(toString(kind)) + "=" + std::string(name));
  auto ran = [&] {
    HIER_CHECK(lastChosenAlgorithm == name, where << ": ran " << lastChosenAlgorithm << ", not the forced one");
  };
  auto sumAt = [&](size_t i) {
    float sum = 0;
    for (int r = 0; r < n; ++r) sum += value(r, i);
    return sum;
  };
  switch (kind) {
    case CollectiveKind::Allreduce: {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = value(me, i);
      Collective c(group, seq++, kTimeout);
      allreduce(c, view(data), ReduceOp::Sum);
      ran();
      for (size_t i = 0; i < count; ++i) HIER_CHECK(data[i] == sumAt(i), where << " at " << i << ": " << data[i]);
      break;
    }
    case CollectiveKind::Reduce: {
      const int root = n - 1;
      std::vector<float> input(count), output(count, -1.0f);
      for (size_t i = 0; i < count; ++i) input[i] = value(me, i);
      Collective c(group, seq++, kTimeout);
      reduce(c, view(input), view(output), ReduceOp::Sum, root);
      ran();
      for (size_t i = 0; me == root && i < count; ++i) HIER_CHECK(output[i] == sumAt(i), where << " at " << i);
      break;
    }
    case CollectiveKind::Broadcast: {
      const int root = 1 % n;
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = value(me, i);
      Collective c(group, seq++, kTimeout);
      broadcast(c, view(data), root);
      ran();
      for (size_t i = 0; i < count; ++i) HIER_CHECK(data[i] == value(root, i), where << " at " << i);
      break;
    }
    case CollectiveKind::Allgather: {
      std::vector<float> input(count);
      for (size_t i = 0; i < count; ++i) input[i] = value(me, i);
      std::vector<std::vector<float>> parts(static_cast<size_t>(n), std::vector<float>(count, -1.0f));
      std::vector<Buffer> outs;
      for (auto& part : parts) outs.push_back(view(part));
      Collective c(group, seq++, kTimeout);
      allgather(c, view(input), outs);
      ran();
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) HIER_CHECK(parts[size_t(r)][i] == value(r, i), where << " part " << r);
      }
      // Again with the input in the next rank's output part, which the call overwrites.
      auto& next = parts[size_t((me + 1) % n)];
      for (size_t i = 0; i < count; ++i) next[i] = value(me, i);
      for (int r = 0; r < n; ++r) {
        if (r != (me + 1) % n) std::fill(parts[size_t(r)].begin(), parts[size_t(r)].end(), -1.0f);
      }
      Collective again(group, seq++, kTimeout);
      allgather(again, view(next), outs);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          HIER_CHECK(parts[size_t(r)][i] == value(r, i), where << ", input in another part: part " << r);
        }
      }
      break;
    }
    case CollectiveKind::Gather:
    case CollectiveKind::Scatter: {
      const int root = n - 1;
      std::vector<float> mine(count);
      std::vector<std::vector<float>> parts(static_cast<size_t>(n), std::vector<float>(count, -1.0f));
      std::vector<Buffer> views;
      if (kind == CollectiveKind::Scatter) {
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) parts[size_t(r)][i] = value(r, i);
        }
      } else {
        for (size_t i = 0; i < count; ++i) mine[i] = value(me, i);
      }
      if (me == root) {
        for (auto& part : parts) views.push_back(view(part));
      }
      Collective c(group, seq++, kTimeout);
      if (kind == CollectiveKind::Gather) {
        gather(c, view(mine), views, root);
      } else {
        scatter(c, views, view(mine), root);
      }
      ran();
      if (kind == CollectiveKind::Scatter) {
        for (size_t i = 0; i < count; ++i) HIER_CHECK(mine[i] == value(me, i), where << " at " << i);
      } else if (me == root) {
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) HIER_CHECK(parts[size_t(r)][i] == value(r, i), where << " part " << r);
        }
      }
      break;
    }
    case CollectiveKind::ReduceScatter: {
      // Part p of every rank's input holds value(rank, p * count + i); this rank gets the sum of part `me`.
      std::vector<std::vector<float>> inputs(static_cast<size_t>(n), std::vector<float>(count));
      std::vector<Buffer> ins;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < count; ++i) inputs[size_t(p)][i] = value(me, size_t(p) * count + i);
        ins.push_back(view(inputs[size_t(p)]));
      }
      std::vector<float> output(count, -1.0f);
      Collective c(group, seq++, kTimeout);
      reduceScatter(c, ins, view(output), ReduceOp::Sum);
      ran();
      for (size_t i = 0; i < count; ++i) {
        HIER_CHECK(output[i] == sumAt(size_t(me) * count + i), where << " at " << i);
      }
      break;
    }
    case CollectiveKind::Alltoall: {
      // Uneven: rank s sends rank d lengthOf(s, d) elements, value(s, i) + d; at one element some parts
      // are empty.
      auto lengthOf = [&](int s, int d) { return count == 1 ? size_t((s + d) % 3) : count + size_t((s + d) % 3); };
      std::vector<std::vector<float>> sent(static_cast<size_t>(n)), received(static_cast<size_t>(n));
      std::vector<Buffer> ins, outs, flatOuts;
      size_t flatCount = 0;
      for (int p = 0; p < n; ++p) flatCount += lengthOf(p, me);
      // The outputs once as parts of their own, once back to back in rank order (alltoall_single's).
      std::vector<float> flat(flatCount);
      size_t at = 0;
      for (int p = 0; p < n; ++p) {
        sent[size_t(p)].resize(lengthOf(me, p));
        for (size_t i = 0; i < sent[size_t(p)].size(); ++i) sent[size_t(p)][i] = value(me, i) + float(p);
        received[size_t(p)].resize(lengthOf(p, me));
        ins.push_back(view(sent[size_t(p)]));
        outs.push_back(view(received[size_t(p)]));
        flatOuts.push_back(Buffer{flat.data() + at, lengthOf(p, me), DataType::Float32, MemoryType::Host});
        at += lengthOf(p, me);
      }
      std::vector<uint64_t> known(2 * size_t(n) * size_t(n));
      for (int s = 0; s < n; ++s) {
        for (int d = 0; d < n; ++d) {
          const uint64_t bytes = lengthOf(s, d) * sizeof(float);
          known[2 * size_t(n) * size_t(s) + size_t(d)] = bytes;      // s sends d
          known[2 * size_t(n) * size_t(d) + size_t(n + s)] = bytes;  // d expects from s
        }
      }
      // Sharing the split sizes, then given them (as the plugin's agreement gives them), into each layout.
      const std::vector<const std::vector<uint64_t>*> ways = {nullptr, &known};
      for (const std::vector<uint64_t>* given : ways) {
        for (bool backToBack : {false, true}) {
          for (auto& r : received) std::fill(r.begin(), r.end(), -1.0f);
          std::fill(flat.begin(), flat.end(), -1.0f);
          Collective c(group, seq++, kTimeout);
          alltoall(c, ins, backToBack ? flatOuts : outs, given);
          ran();
          for (int p = 0; p < n; ++p) {
            const float* got =
                backToBack ? static_cast<const float*>(flatOuts[size_t(p)].data) : received[size_t(p)].data();
            for (size_t i = 0; i < lengthOf(p, me); ++i) {
              HIER_CHECK(got[i] == value(p, i) + float(me), where << (given ? " (sizes given)" : "")
                                                                  << (backToBack ? " (back to back)" : "") << " from "
                                                                  << p << " at " << i);
            }
          }
        }
      }
      break;
    }
    case CollectiveKind::Barrier: {
      Collective c(group, seq++, kTimeout);
      barrier(c);
      ran();
      break;
    }
  }
  setAlgorithms("");
}

// The bytes and elements a collective's shape carries for `count` elements per part, as
// select/dispatch.cpp computes them.
std::pair<size_t, size_t> extentOf(CollectiveKind kind, size_t count, int n) {
  switch (kind) {
    case CollectiveKind::Allgather:
    case CollectiveKind::ReduceScatter: return {count * n * sizeof(float), count * n};
    case CollectiveKind::Alltoall:
    case CollectiveKind::Barrier: return {0, 0};
    default: return {count * sizeof(float), count};
  }
}

TEST(AlgorithmTable, EveryAlgorithmIsRunSomewhereInTheLoopBelow) {
  for (auto kind : kCollectiveKinds) {
    for (auto name : algorithmNames(kind, MemoryType::Host)) {
      bool somewhere = false;
      for (const auto& layout : kLayouts) {
        const Topology t = topologyOf(layout);
        for (size_t count : kCounts) {
          auto [bytes, elements] = extentOf(kind, count, t.size());
          somewhere |= algorithmApplies(kind, name, shapeOf(t, bytes, elements));
        }
      }
      EXPECT_TRUE(somewhere) << toString(kind) << "=" << name << " applies nowhere in the loop's layouts and sizes";
    }
  }
}

class ForcedAlgorithms : public ::testing::TestWithParam<std::string> {};

TEST_P(ForcedAlgorithms, EveryAlgorithmOfEveryTableGivesTheReferenceResult) {
  const std::string layout = GetParam();
  auto failures = runRanks(
      int(layout.size()),
      [&](const RankContext& ctx) {
        setenv("HIER_HOST_ID", ("host-" + std::string(1, layout[size_t(ctx.rank)])).c_str(), 1);
        Group group(ctx.bootstrap, ctx.rank, ctx.size, 5, "table");
        const Deadline deadline = Deadline::after(kTimeout);
        const Topology& topology = group.topology(deadline);
        uint64_t seq = 0;
        for (auto kind : kCollectiveKinds) {
          for (auto name : algorithmNames(kind, MemoryType::Host)) {
            for (size_t count : kCounts) {
              auto [bytes, elements] = extentOf(kind, count, ctx.size);
              Shape shape{bytes, elements, ctx.size, &topology};
              shape.arenaReady = [&] { return group.arena(deadline) != nullptr; };
              shape.crossMemoryAttach = [&] {
                const auto* arena = group.arena(deadline);
                return arena != nullptr && arena->crossMemoryAttach();
              };
              if (!algorithmApplies(kind, name, shape)) continue;
              const std::string where = layout + " " + toString(kind) + "=" + std::string(name) + " x" +
                                        std::to_string(count) + " rank " + std::to_string(ctx.rank);
              runForced(group, seq, kind, name, count, where);
            }
          }
        }
      },
      std::chrono::seconds(300));
  EXPECT_EQ(failures, "");
}

// 3 and 5 ranks on one host; 2+1 (hierarchy, uneven) and 2x2 (hierarchy with rails).
INSTANTIATE_TEST_SUITE_P(Layouts, ForcedAlgorithms, ::testing::ValuesIn(kLayouts),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace hier::transport
