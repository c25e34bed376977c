// The hierarchical schedules as the device path runs them: every schedule body of transport/hierarchy,
// called with node steps that stage each fragment through slots of their own and scale contributions
// inside the node's reductions (staging_node_steps.h), on layouts of simulated hosts, against values
// computed locally; broadcast and allgather also with the network steps on the pieces themselves (as
// where UCX takes device memory). And the pure decision of how the stages of a reduction reduce.
//
// meson runs the Staging tests with HIER_HIERARCHY_FRAGMENT_BYTES=4K, so every buffer below of more than
// a few elements goes through many fragments, the network steps on their own thread.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "tests/transport/multiprocess.h"
#include "tests/transport/staging_node_steps.h"
#include "tests/transport/values.h"
#include "transport/base/settings.h"
#include "transport/group/collective.h"
#include "transport/group/group.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/reduction_stages.h"
#include "transport/select/algorithm_table.h"

namespace hier::transport {
namespace {

using hierarchy::reductionStages;
using testing::RankContext;
using testing::runRanks;
using testing::StagingNodeSteps;
using testing::value;
using testing::view;

TEST(ReductionStages, PlainOpsReduceAlikeInEveryStage) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max, ReduceOp::BXor}) {
    for (bool scales : {false, true}) {
      auto s = reductionStages(op, std::nullopt, 8, scales);
      EXPECT_EQ(s.node.op, op);
      EXPECT_FALSE(s.node.scale.has_value());
      EXPECT_EQ(s.network, op);
      EXPECT_EQ(s.divideBy, 1);
      EXPECT_FALSE(s.multiplyBy.has_value());
    }
  }
}

TEST(ReductionStages, AverageScalesInTheNodeWhereItCanAndDividesOnceElsewhere) {
  // NCCL (floating point): every contribution times 1/8 inside the node's reduction, then sums.
  auto device = reductionStages(ReduceOp::Avg, std::nullopt, 8, true);
  EXPECT_EQ(device.node.op, ReduceOp::Sum);
  ASSERT_TRUE(device.node.scale.has_value());
  EXPECT_DOUBLE_EQ(*device.node.scale, 0.125);
  EXPECT_EQ(device.network, ReduceOp::Sum);
  EXPECT_EQ(device.divideBy, 1);
  // The host, or integers: sums everywhere, one division by the group's size at the end.
  auto host = reductionStages(ReduceOp::Avg, std::nullopt, 8, false);
  EXPECT_FALSE(host.node.scale.has_value());
  EXPECT_EQ(host.node.op, ReduceOp::Sum);
  EXPECT_EQ(host.network, ReduceOp::Sum);
  EXPECT_EQ(host.divideBy, 8);
}

TEST(ReductionStages, PremultipliedSumScalesInTheNodeWhereItCanAndOnceAtTheEndElsewhere) {
  auto device = reductionStages(ReduceOp::Sum, 0.25, 4, true);
  ASSERT_TRUE(device.node.scale.has_value());
  EXPECT_DOUBLE_EQ(*device.node.scale, 0.25);
  EXPECT_FALSE(device.multiplyBy.has_value());
  auto host = reductionStages(ReduceOp::Sum, 0.25, 4, false);
  EXPECT_FALSE(host.node.scale.has_value());
  ASSERT_TRUE(host.multiplyBy.has_value());
  EXPECT_DOUBLE_EQ(*host.multiplyBy, 0.25);
  EXPECT_EQ(host.divideBy, 1);
}

TEST(ReductionStages, FinishDividesAndMultipliesInPlace) {
  std::vector<float> data{8.0f, -4.0f, 2.0f};
  reductionStages(ReduceOp::Avg, std::nullopt, 4, false).finish(view(data));
  EXPECT_EQ(data, (std::vector<float>{2.0f, -1.0f, 0.5f}));
  reductionStages(ReduceOp::Sum, 3.0, 4, false).finish(view(data));
  EXPECT_EQ(data, (std::vector<float>{6.0f, -3.0f, 1.5f}));
}

// ---- every schedule, staged as on a device -------------------------------------------------------

constexpr std::chrono::milliseconds kTimeout{60000};

// What a reduction of value(r, i) over `n` ranks must give. `op` names the transport op; `premultiply`
// scales each contribution.
float expected(ReduceOp op, std::optional<double> premultiply, int n, size_t i) {
  float sum = 0.0f;
  for (int r = 0; r < n; ++r) sum += value(r, i);
  if (premultiply) return float(double(sum) * *premultiply);
  if (op == ReduceOp::Avg) return sum / float(n);
  return testing::expectedReduction(op, n, i);
}

// Scaling each contribution before summing rounds differently from dividing the sum: allow for it.
bool close(float got, float want) { return std::fabs(got - want) <= 1e-5f * std::max(1.0f, std::fabs(want)); }

struct Case {
  ReduceOp op;
  std::optional<double> premultiply;
  const char* name;
};
const Case kCases[] = {{ReduceOp::Sum, std::nullopt, "SUM"},
                       {ReduceOp::Avg, std::nullopt, "AVG"},
                       {ReduceOp::Max, std::nullopt, "MAX"},
                       {ReduceOp::Sum, 0.5, "PREMUL_SUM(0.5)"}};

// The hierarchical schedules of `table` that apply to a group of this topology, on device memory (as the
// CUDA path runs them) at the largest size: every schedule row is found here, none named.
template <typename Row>
std::vector<Row> scheduleRows(std::span<const Row> table, const Shape& shape) {
  std::vector<Row> rows;
  for (const auto& row : table) {
    if (row.road == Road::Schedule && row.applies(shape)) rows.push_back(row);
  }
  return rows;
}

void exerciseStagedSchedules(const RankContext& ctx, const std::string& layout, bool deferred) {
  setenv("HIER_HOST_ID", ("host-" + std::string(1, layout[size_t(ctx.rank)])).c_str(), 1);
  Group group(ctx.bootstrap, ctx.rank, ctx.size, 5, "staged");
  const int n = ctx.size;
  uint64_t seq = 0;
  // Sizes: tiny, fewer elements than ranks per fragment, and many fragments of odd sizes.
  const size_t many = 7 * settings().hierarchyFragmentBytes / sizeof(float) + 13;
  HIER_CHECK(hierarchy::fragmentCount(many * sizeof(float), many) >= 7, "the largest buffer is not fragmented");
  Shape device{many * sizeof(float), many, n, &group.topology(Deadline::after(kTimeout))};
  device.memory = MemoryType::Cuda;
  device.ncclTakes = true;
  for (size_t count : {size_t(1), size_t(5), many}) {
    for (const auto& row : scheduleRows(allreduceTable(), device)) {
      for (const Case& k : kCases) {
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = value(ctx.rank, i);
        Collective c(group, seq++, kTimeout);
        StagingNodeSteps node(c, /*direct=*/false, deferred);
        node.run(c, [&](Collective& cc) { row.schedule(cc, node, view(data), k.op, k.premultiply); });
        for (size_t i = 0; i < count; ++i) {
          HIER_CHECK(close(data[i], expected(k.op, k.premultiply, n, i)),
                     layout << " allreduce " << row.name << " " << k.name << " x" << count << " at " << i << ": "
                            << data[i] << " != " << expected(k.op, k.premultiply, n, i));
        }
      }
    }
    for (int root = 0; root < n; ++root) {
      std::vector<float> data(count), input(count), output(count, -1.0f);
      for (const auto& row : scheduleRows(broadcastTable(), device)) {
        for (bool direct : {false, true}) {
          for (size_t i = 0; i < count; ++i) data[i] = value(ctx.rank, i);
          {
            Collective c(group, seq++, kTimeout);
            StagingNodeSteps node(c, direct, deferred);
            node.run(c, [&](Collective& cc) { row.schedule(cc, node, view(data), root); });
          }
          for (size_t i = 0; i < count; ++i) {
            HIER_CHECK(data[i] == value(root, i), layout << " broadcast " << row.name << (direct ? " direct" : "")
                                                         << " from " << root << " x" << count << " at " << i);
          }
        }
      }
      for (size_t i = 0; i < count; ++i) input[i] = value(ctx.rank, i);
      const auto original = input;
      for (const auto& row : scheduleRows(reduceTable(), device)) {
        for (const Case& k : kCases) {
          std::fill(output.begin(), output.end(), -1.0f);
          Collective c(group, seq++, kTimeout);
          StagingNodeSteps node(c, /*direct=*/false, deferred);
          node.run(
              c, [&](Collective& cc) { row.schedule(cc, node, view(input), view(output), k.op, root, k.premultiply); });
          HIER_CHECK(input == original, layout << " reduce " << row.name << " changed its input");
          for (size_t i = 0; i < count; ++i) {
            const float want = ctx.rank == root ? expected(k.op, k.premultiply, n, i) : -1.0f;
            HIER_CHECK(close(output[i], want), layout << " reduce " << row.name << " " << k.name << " to " << root
                                                      << " x" << count << " at " << i << ": " << output[i]
                                                      << " != " << want);
          }
        }
      }
    }
    // Allgather and reduce-scatter with parts of unequal sizes (count + rank).
    std::vector<float> input(count + size_t(ctx.rank));
    for (size_t i = 0; i < input.size(); ++i) input[i] = value(ctx.rank, i);
    for (const auto& row : scheduleRows(allgatherTable(), device)) {
      for (bool direct : {false, true}) {
        auto [parts, views] = testing::unevenParts(n, count, -1.0f);
        {
          Collective c(group, seq++, kTimeout);
          StagingNodeSteps node(c, direct, deferred);
          node.run(c, [&](Collective& cc) { row.schedule(cc, node, view(input), views); });
        }
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count + size_t(r); ++i) {
            HIER_CHECK(parts[size_t(r)][i] == value(r, i), layout << " allgather " << row.name
                                                                  << (direct ? " direct" : "") << " part " << r << " x"
                                                                  << count << " at " << i);
          }
        }
      }
    }
    for (const auto& row : scheduleRows(reduceScatterTable(), device)) {
      for (const Case& k : kCases) {
        auto contributions = testing::unevenContributions(ctx.rank, n, count);
        const auto& in = contributions.views;
        std::vector<float> out(count + size_t(ctx.rank), -1.0f);
        Collective c(group, seq++, kTimeout);
        StagingNodeSteps node(c, /*direct=*/false, deferred);
        node.run(c, [&](Collective& cc) { row.schedule(cc, node, in, view(out), k.op, k.premultiply); });
        for (size_t j = 0; j < out.size(); ++j) {
          const float want = expected(k.op, k.premultiply, n, j + 10 * size_t(ctx.rank));
          HIER_CHECK(close(out[j], want), layout << " reduce_scatter " << row.name << " " << k.name << " x" << count
                                                 << " at " << j << ": " << out[j] << " != " << want);
        }
      }
    }
  }
}

class StagedLayouts : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

// Deferred: in the two passes of a device whose caller only enqueues (node_steps.h), the node steps on
// a stream of their own that holds at each gate until the network pass opens it. A pass that waited
// for the network in the enqueue pass, a gate enqueued too late (a slot refilled under its network
// step) or a node step in the network pass fails here.
TEST_P(StagedLayouts, EveryScheduleStagedAsOnADeviceGivesTheReferenceResult) {
  const auto& [layout, deferred] = GetParam();
  auto failures = runRanks(
      int(layout.size()), [&](const RankContext& ctx) { exerciseStagedSchedules(ctx, layout, deferred); },
      std::chrono::seconds(300));
  EXPECT_EQ(failures, "");
}

// 2x2, 3x2 interleaved (nodes need not be contiguous in rank order), 2+1 (leaders only).
INSTANTIATE_TEST_SUITE_P(Staging, StagedLayouts,
                         ::testing::Combine(::testing::Values("AABB", "ABCABC", "AAB"), ::testing::Bool()),
                         [](const auto& info) {
                           return "layout_" + std::get<0>(info.param) + (std::get<1>(info.param) ? "_deferred" : "");
                         });

}  // namespace
}  // namespace hier::transport
