// The CUDA path's decisions (plugin/cuda/cuda_plan.hpp), checked on the CPU for the layouts the GPU
// machines have: which NCCL communicator every rank makes and under which store key, which device a
// barrier orders, when a failure fails the group. Which road each collective takes on device memory is
// the transport's table (tests/transport/test_algorithm_table.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "plugin/cuda/cuda_plan.hpp"
#include "plugin/cuda/stream_leases.hpp"

namespace hier::cuda_plan {
namespace {

using transport::Topology;

std::vector<std::string> hostsOf(const std::string& layout) {
  std::vector<std::string> hosts;
  for (char c : layout) hosts.push_back(std::string("host-") + c);
  return hosts;
}

// Every rank's plan, by rank, for one layout.
std::vector<NcclCommunicator> plans(const std::string& layout, int ordinal = 0) {
  std::vector<NcclCommunicator> all;
  for (int r = 0; r < int(layout.size()); ++r)
    all.push_back(ncclCommunicator(Topology::fromHosts(hostsOf(layout), r), ordinal));
  return all;
}

// The members of each communicator agree on its key, size and members, take the places 0..size-1 in
// member order, and no two communicators share a key.
void expectConsistent(const std::vector<NcclCommunicator>& all) {
  std::map<std::string, std::vector<int>> membersByKey;
  for (int r = 0; r < int(all.size()); ++r) membersByKey[all[size_t(r)].key].push_back(r);
  for (const auto& [key, members] : membersByKey) {
    for (int r : members) {
      const auto& plan = all[size_t(r)];
      EXPECT_EQ(plan.ranks, members) << "rank " << r << " under " << key;
      EXPECT_EQ(plan.size, int(members.size())) << key;
      EXPECT_EQ(members[size_t(plan.rank)], r) << "rank " << r << "'s place in " << key;
    }
  }
}

TEST(NcclCommunicatorPlan, TwoHostsOfFourGpusMakeOneCommunicatorPerHostUnderKeysEveryMemberComputesAlike) {
  // Ranks 0-3 on host A with cuda:0..3, ranks 4-7 on host B with cuda:0..3: the device index appears
  // nowhere, so a rank on cuda:1 looks for the very key its host's first rank publishes.
  auto all = plans("AAAABBBB");
  expectConsistent(all);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(all[size_t(r)].key, "nccl/node/0/0/");
    EXPECT_EQ(all[size_t(r)].rank, r);
    EXPECT_EQ(all[size_t(r)].ranks, (std::vector<int>{0, 1, 2, 3}));
  }
  for (int r = 4; r < 8; ++r) {
    EXPECT_EQ(all[size_t(r)].key, "nccl/node/1/0/");
    EXPECT_EQ(all[size_t(r)].rank, r - 4);
    EXPECT_EQ(all[size_t(r)].ranks, (std::vector<int>{4, 5, 6, 7}));
  }
}

TEST(NcclCommunicatorPlan, InterleavedAndUnevenHostsAndOneHost) {
  for (const char* layout : {"ABAB", "ABCABC", "AAB", "ABB", "AAAA", "A"}) {
    auto all = plans(layout);
    expectConsistent(all);
    std::set<std::string> keys;
    for (const auto& plan : all) keys.insert(plan.key);
    EXPECT_EQ(keys.size(), std::set<char>(layout, layout + std::string(layout).size()).size()) << layout;
  }
  auto one = plans("AAAA");
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(one[size_t(r)].key, "nccl/group/0/");
    EXPECT_EQ(one[size_t(r)].rank, r);
  }
  auto interleaved = plans("ABAB");
  EXPECT_EQ(interleaved[2].key, "nccl/node/0/0/");
  EXPECT_EQ(interleaved[2].ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(interleaved[2].rank, 1);
}

TEST(NcclCommunicatorPlan, ASecondDeviceGetsACommunicatorOfItsOwn) {
  EXPECT_NE(plans("AABB", 0)[0].key, plans("AABB", 1)[0].key);
  EXPECT_EQ(plans("AABB", 1)[1].key, plans("AABB", 1)[0].key);
  EXPECT_NE(plans("AAAA", 0)[0].key, plans("AAAA", 1)[0].key);
}

// ncclCommSplit run on paper: within each communicator of the parent, the ranks that pass one color
// make a communicator, placed by key. Each must be exactly the communicator its child would make for
// itself (its own plan on its own layout): the same members, in the same places. new_group makes one
// child (the other ranks pass no color); split_group several at once, each rank passing its own.
TEST(SplitPlan, SplittingTheParentsCommunicatorGivesEachChildItsOwn) {
  struct Case {
    std::string parent;
    std::vector<std::vector<int>> children;
  };
  const std::vector<Case> cases = {{"AAAA", {{1, 3}}},
                                   {"AAAA", {{3, 0, 2}}},
                                   {"AAAA", {{0, 1}, {2, 3}}},
                                   {"AAAA", {{0, 2}, {3, 1}}},
                                   {"AABB", {{0, 2, 3}}},
                                   {"AABB", {{2, 3}}},
                                   {"AABB", {{3, 2, 1, 0}}},
                                   {"AABB", {{0, 2}, {1, 3}}},
                                   {"ABAB", {{0, 1, 2, 3}}},
                                   {"AAABBB", {{5, 0, 4}}},
                                   {"AABBC", {{0, 1, 4}}},
                                   {"AAAA", {{0}, {1, 2, 3}}},
                                   {"AAAABBBB", {{0, 1, 4, 5}, {2, 3, 6, 7}}}};
  for (const auto& [parentLayout, children] : cases) {
    const auto parent = plans(parentLayout);
    std::vector<const std::vector<int>*> childOf(parentLayout.size(), nullptr);
    for (const auto& members : children) {
      for (int m : members) childOf[size_t(m)] = &members;
    }
    // What the split makes: by (parent communicator, color), the members by key, and the sizes they expect.
    std::map<std::pair<std::string, int>, std::map<int, int>> made;
    std::map<std::pair<std::string, int>, std::set<int>> sizes;
    for (int r = 0; r < int(parentLayout.size()); ++r) {
      const Topology t = Topology::fromHosts(hostsOf(parentLayout), r);
      const SplitPlan plan = childOf[size_t(r)] ? splitOf(t, *childOf[size_t(r)]) : splitOf(t, children.front());
      const bool member = childOf[size_t(r)] != nullptr;
      EXPECT_EQ(plan.color == SplitPlan::kNoColor, !member) << parentLayout << " rank " << r;
      if (!member) continue;
      const std::pair<std::string, int> where{parent[size_t(r)].key, plan.color};
      EXPECT_TRUE(made[where].emplace(plan.key, r).second) << parentLayout << ": two ranks with key " << plan.key;
      sizes[where].insert(plan.size);
    }
    std::set<std::vector<int>> madeComms, childComms;
    for (const auto& [where, byKey] : made) {
      EXPECT_EQ(sizes[where], std::set<int>{int(byKey.size())}) << parentLayout << ": the size each member expects";
      std::vector<int> comm;
      for (const auto& [key, r] : byKey) {
        EXPECT_EQ(key, int(comm.size())) << parentLayout << ": keys are places 0..n-1";
        comm.push_back(r);
      }
      madeComms.insert(comm);
    }
    for (const auto& members : children) {
      std::string childLayout;
      for (int m : members) childLayout += parentLayout[size_t(m)];
      const auto child = plans(childLayout);
      for (size_t i = 0; i < child.size(); ++i) {
        std::vector<int> comm;
        for (int c : child[i].ranks) comm.push_back(members[size_t(c)]);  // as ranks of the parent
        childComms.insert(comm);
      }
    }
    EXPECT_EQ(madeComms, childComms) << parentLayout;
  }
}

TEST(BarrierDevice, TheNamedOrTheBoundDeviceNeverOneRanksHistory) {
  EXPECT_EQ(barrierDevice(/*named=*/1, /*bound=*/-1, /*visible=*/0), -1);  // Accelerate on a CPU box
  EXPECT_EQ(barrierDevice(0, 0, 0), -1);
  EXPECT_EQ(barrierDevice(-1, -1, 0), -1);
  EXPECT_EQ(barrierDevice(1, 0, 2), 1);     // the named device first
  EXPECT_EQ(barrierDevice(-1, 0, 2), 0);    // else the bound one
  EXPECT_EQ(barrierDevice(-1, -1, 2), -1);  // else the CPU barrier, whatever this rank ran before
}

TEST(NetworkDeviceGpu, TheDeviceSetElseTorchrunsConventionElseTheOnlyOne) {
  EXPECT_EQ(networkDeviceGpu(0, 0, 3), -1);  // no GPU: the NIC goes by local rank alone
  EXPECT_EQ(networkDeviceGpu(0, 1, 3), 0);   // CUDA_VISIBLE_DEVICES gave this rank one GPU
  EXPECT_EQ(networkDeviceGpu(5, 8, 3), 5);   // torch.cuda.set_device(5) before the group
  EXPECT_EQ(networkDeviceGpu(0, 8, 3), 3);   // not set yet: device = local rank, not 0 for all
  EXPECT_EQ(networkDeviceGpu(0, 8, 11), 3);
  EXPECT_EQ(networkDeviceGpu(0, 8, -1), 0);
}

TEST(FailsGroup, AlwaysOnceNcclWasAbortedAndForEveryFailureInFlight) {
  using transport::ErrorKind;
  for (ErrorKind kind : {ErrorKind::InvalidUsage, ErrorKind::Timeout, ErrorKind::PeerFailure, ErrorKind::Mismatch,
                         ErrorKind::Aborted, ErrorKind::Internal}) {
    EXPECT_TRUE(failsGroup(kind, true)) << transport::toString(kind);
  }
  EXPECT_FALSE(failsGroup(ErrorKind::InvalidUsage, false));  // refused before anything was enqueued
  EXPECT_TRUE(failsGroup(ErrorKind::Timeout, false));
  EXPECT_TRUE(failsGroup(ErrorKind::Internal, false));
}

TEST(StreamPriority, HighTakesTheGreatestWhichCudaNumbersLowest) {
  EXPECT_EQ(streamPriority(true, /*least=*/0, /*greatest=*/-5), -5);
  EXPECT_EQ(streamPriority(false, 0, -5), 0);
}

TEST(StreamLeases, NoTwoGroupsHoldOneStreamAndAClosedGroupsStreamsComeBack) {
  StreamLeases<int> leases;
  int made = 0;
  auto make = [&] { return ++made; };
  // Two groups on device 0, each its own stream; a high-priority one apart from them.
  const int a = leases.acquire(0, 0, make), b = leases.acquire(0, 0, make), high = leases.acquire(0, -5, make);
  EXPECT_NE(a, b);
  EXPECT_NE(high, a);
  EXPECT_NE(high, b);
  EXPECT_EQ(made, 3);
  // The first group closes: the next group of that device and priority gets its stream, not a new one.
  leases.release(0, 0, a);
  EXPECT_EQ(leases.freeCount(0, 0), 1u);
  EXPECT_EQ(leases.acquire(0, -5, make), 4);  // another priority: a new stream
  EXPECT_EQ(leases.acquire(1, 0, make), 5);   // another device: a new stream
  EXPECT_EQ(leases.acquire(0, 0, make), a);
  EXPECT_EQ(leases.freeCount(0, 0), 0u);
  EXPECT_EQ(made, 5);
}

}  // namespace
}  // namespace hier::cuda_plan
