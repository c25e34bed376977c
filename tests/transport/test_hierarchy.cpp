// The hierarchy: topology, fragments, and every hierarchical schedule against values computed locally,
// on layouts of simulated hosts (HIER_HOST_ID per rank; the ranks really share this machine).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/transport/multiprocess.h"
#include "tests/transport/values.h"
#include "transport/base/settings.h"
#include "transport/group/collective.h"
#include "transport/group/group.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/select/dispatch.h"
#include "transport/topology/topology.h"

namespace hier::transport {
namespace {

using testing::expectedReduction;
using testing::RankContext;
using testing::runRanks;
using testing::value;
using testing::view;

std::vector<std::string> hostsOf(const std::string& layout) {
  std::vector<std::string> hosts;
  for (char c : layout) hosts.push_back(std::string("host-") + c);
  return hosts;
}

TEST(Topology, NodesLocalRanksAndRails) {
  // Ranks 0 and 2 on host A, 1 and 3 on host B: nodes in order of first appearance.
  Topology t = Topology::fromHosts(hostsOf("ABAB"), 2);
  EXPECT_EQ(t.nodeCount(), 2);
  EXPECT_EQ(t.nodes, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(t.node(), 0);
  EXPECT_EQ(t.localRank(), 1);
  EXPECT_TRUE(t.uniform());
  EXPECT_EQ(t.rail(1), (std::vector<int>{2, 3}));
  EXPECT_EQ(t.leaders(), (std::vector<int>{0, 1}));
  EXPECT_EQ(t.describe(), "2 nodes: [0 2] [1 3]");

  Topology uneven = Topology::fromHosts(hostsOf("AAB"), 2);
  EXPECT_FALSE(uneven.uniform());
  EXPECT_EQ(uneven.rail(1), (std::vector<int>{1}));  // node B has no second rank
}

TEST(Pipeline, FragmentsAreAtMostTheSettingAndNeverEmpty) {
  const size_t f = settings().hierarchyFragmentBytes;
  EXPECT_EQ(hierarchy::fragmentCount(0, 0), 1u);
  EXPECT_EQ(hierarchy::fragmentCount(f, f / 4), 1u);
  EXPECT_EQ(hierarchy::fragmentCount(f + 1, f), 2u);
  EXPECT_EQ(hierarchy::fragmentCount(64 * f, 16 * f, 2), 64u);
  // Each fragment keeps at least minElements elements (one per rank of the node that splits it).
  EXPECT_EQ(hierarchy::fragmentCount(64 * f, 5, 2), 2u);
  EXPECT_EQ(hierarchy::fragmentCount(64 * f, 1, 2), 1u);
  size_t covered = 0;
  for (const auto& r : hierarchy::fragmentRanges(1000003, 7)) {
    EXPECT_EQ(r.offset, covered);
    EXPECT_GE(r.count, 1000003u / 7);
    covered += r.count;
  }
  EXPECT_EQ(covered, 1000003u);
}

constexpr std::chrono::milliseconds kTimeout{30000};

// What a group learns about its ranks is learned once, whichever threads ask at the same time (the
// executor, a schedule's network thread and the CUDA path may all ask first).
TEST(Group, TopologyAndSubGroupsAskedFromTwoThreadsAtOnceAreMadeOnce) {
  auto failures = runRanks(4, [](const RankContext& ctx) {
    setenv("HIER_HOST_ID", ctx.rank < 2 ? "host-A" : "host-B", 1);
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 4, "threads");
    const Deadline deadline = Deadline::after(kTimeout);
    const Topology* topology[2] = {};
    Group* node[2] = {};
    Group* rail[2] = {};
    std::thread other([&] {
      topology[1] = &group.topology(deadline);
      rail[1] = &group.rail(deadline);
      node[1] = &group.node(deadline);
    });
    topology[0] = &group.topology(deadline);
    node[0] = &group.node(deadline);
    rail[0] = &group.rail(deadline);
    other.join();
    HIER_CHECK(topology[0] == topology[1] && node[0] == node[1] && rail[0] == rail[1], "made twice");
    HIER_CHECK(topology[0]->nodeCount() == 2 && node[0]->size() == 2 && rail[0]->size() == 2, topology[0]->describe());
    // The sub-groups work: a node allreduce and a rail allreduce.
    for (Group* sub : {node[0], rail[0]}) {
      std::vector<float> data(100, float(ctx.rank));
      Collective c(*sub, sub->nextSequence(), kTimeout);
      allreduce(c, view(data), ReduceOp::Sum);
      float want = 0;
      for (int member : sub->communicator().names()) want += float(member);
      HIER_CHECK(data[0] == want, sub->name() << " summed " << data[0] << " != " << want);
    }
  });
  EXPECT_EQ(failures, "");
}

// Every collective with a hierarchical schedule, at sizes on both sides of the split-rail threshold.
void exerciseLayout(const RankContext& ctx, const std::string& layout) {
  setenv("HIER_HOST_ID", ("host-" + std::string(1, layout[size_t(ctx.rank)])).c_str(), 1);
  Group comm(ctx.bootstrap, ctx.rank, ctx.size, 3, "layout");
  uint64_t seq = 0;
  const int n = ctx.size;
  for (size_t count : {size_t(1), size_t(7), size_t(1000), size_t(300001)}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = value(ctx.rank, i);
      Collective c(comm, seq++, kTimeout);
      allreduce(c, view(data), op);
      for (size_t i = 0; i < count; ++i) {
        const float expected = expectedReduction(op, n, i);
        HIER_CHECK(data[i] == expected, layout << " allreduce " << toString(op) << " x" << count << " at " << i << ": "
                                               << data[i] << " != " << expected);
      }
    }
    for (int root = 0; root < n; ++root) {
      std::vector<float> data(count), input(count), output(count, -1.0f);
      for (size_t i = 0; i < count; ++i) data[i] = input[i] = value(ctx.rank, i);
      auto original = input;
      {
        Collective c(comm, seq++, kTimeout);
        broadcast(c, view(data), root);
      }
      {
        Collective c(comm, seq++, kTimeout);
        reduce(c, view(input), view(output), ReduceOp::Sum, root);
      }
      HIER_CHECK(input == original, layout << " reduce changed its input");
      for (size_t i = 0; i < count; ++i) {
        HIER_CHECK(data[i] == value(root, i), layout << " broadcast from " << root << " x" << count);
        if (ctx.rank == root) {
          float sum = 0;
          for (int r = 0; r < n; ++r) sum += value(r, i);
          HIER_CHECK(output[i] == sum, layout << " reduce to " << root << " x" << count << " at " << i);
        }
      }
    }
    // Allgather and reduce-scatter with parts of unequal sizes (count + rank).
    std::vector<float> input(count + size_t(ctx.rank));
    for (size_t i = 0; i < input.size(); ++i) input[i] = value(ctx.rank, i);
    auto [parts, views] = testing::unevenParts(n, count, -1.0f);
    {
      Collective c(comm, seq++, kTimeout);
      allgather(c, view(input), views);
    }
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count + size_t(r); ++i)
        HIER_CHECK(parts[size_t(r)][i] == value(r, i), layout << " allgather part " << r);
    }
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      auto contributions = testing::unevenContributions(ctx.rank, n, count);
      const auto& in = contributions.views;
      std::vector<float> out(count + size_t(ctx.rank), -1.0f);
      Collective c(comm, seq++, kTimeout);
      reduceScatter(c, in, view(out), op);
      for (size_t j = 0; j < out.size(); ++j) {
        const float expected = expectedReduction(op, n, j + 10 * size_t(ctx.rank));
        HIER_CHECK(out[j] == expected, layout << " reduce_scatter " << toString(op) << " x" << count << " at " << j);
      }
    }
  }
}

class Layouts : public ::testing::TestWithParam<std::string> {};

TEST_P(Layouts, EveryHierarchicalScheduleGivesTheReferenceResult) {
  const std::string layout = GetParam();
  auto failures = runRanks(
      int(layout.size()), [&](const RankContext& ctx) { exerciseLayout(ctx, layout); }, std::chrono::seconds(300));
  EXPECT_EQ(failures, "");
}

// 2x2, 2+1, 1+2, 3x2 interleaved (nodes need not be contiguous in rank order), 4x1, 1x4.
INSTANTIATE_TEST_SUITE_P(Hierarchy, Layouts, ::testing::Values("AABB", "AAB", "ABB", "ABCABC", "ABCD", "AAAA"),
                         [](const auto& info) { return "layout_" + info.param; });

}  // namespace
}  // namespace hier::transport
