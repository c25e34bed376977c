// The agreement a collective runs before it moves data (transport/agreement.h), on real processes: the
// same outcome on every rank, at every group size (1, 2, 3, 5: odd sizes wrap the dissemination rounds),
// whether all agree, one rank differs, or some ranks refuse.
#include <gtest/gtest.h>

#include <string>

#include "tests/transport/multiprocess.h"
#include "transport/agreement.h"
#include "transport/collective.h"
#include "transport/group.h"

namespace hier::transport {
namespace {

using testing::RankContext;
using testing::runRanks;
using std::chrono::milliseconds;

CallSignature allreduceOf(uint64_t elements) {
  CallSignature s("allreduce", "float32", elements);
  s.setReduceOp("SUM");
  return s;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Agreement : public ::testing::TestWithParam<int> {};

TEST_P(Agreement, EveryRankLearnsTheSameOutcome) {
  const int size = GetParam();
  auto failures = runRanks(size, [](const RankContext& ctx) {
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    const int last = ctx.size - 1;
    uint64_t sequence = 0;
    auto next = [&] { return Collective(group, sequence++, milliseconds(10000)); };

    {  // all alike
      auto c = next();
      CallSignature mine = allreduceOf(1000);
      auto outcome = agree(c, &mine);
      HIER_CHECK(outcome.agreed(), outcome.describe());
    }
    if (ctx.size > 1) {  // the last rank passes another count: every rank names the last and another one
      auto c = next();
      CallSignature mine = allreduceOf(ctx.rank == last ? 2000 : 1000);
      auto outcome = agree(c, &mine);
      HIER_CHECK(!outcome.agreed() && outcome.refusingRank < 0, outcome.describe());
      const std::string text = outcome.describe();
      HIER_CHECK(contains(text, "rank " + std::to_string(last) + " passed allreduce(float32, 2000 elements, SUM)"),
                 text);
      HIER_CHECK(contains(text, "passed allreduce(float32, 1000 elements, SUM)"), text);
    }
    {  // the root alone refuses: everyone hears why
      auto c = next();
      CallSignature mine("scatter", "float32", 4);
      mine.root = 0;
      auto outcome = ctx.rank == 0 ? agree(c, nullptr, "the scatter list is too short") : agree(c, &mine);
      HIER_CHECK(outcome.refusingRank == 0 && outcome.refusal == "the scatter list is too short", outcome.describe());
    }
    {  // two refuse, and the others disagree too: the lowest refusing rank is the one reported
      auto c = next();
      CallSignature mine = allreduceOf(uint64_t(ctx.rank));
      const bool refuses = ctx.rank == last || ctx.rank == last / 2;
      auto outcome = refuses ? agree(c, nullptr, "refused by " + std::to_string(ctx.rank)) : agree(c, &mine);
      HIER_CHECK(outcome.refusingRank == last / 2, outcome.describe());
      HIER_CHECK(outcome.refusal == "refused by " + std::to_string(last / 2), outcome.describe());
    }
    {  // and the group goes on: the next agreement agrees
      auto c = next();
      CallSignature mine("barrier", "", 0, 0);
      auto outcome = agree(c, &mine);
      HIER_CHECK(outcome.agreed(), outcome.describe());
    }
  });
  EXPECT_EQ(failures, "");
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, Agreement, ::testing::Values(1, 2, 3, 5));

TEST(AgreementSignature, DescribesWhatWasPassed) {
  CallSignature s("reduce", "bfloat16", 12, 3);
  s.setReduceOp("AVG");
  s.root = 2;
  EXPECT_EQ(s.describe(), "reduce(bfloat16, 3 tensors, 12 elements, AVG, root 2)");
  CallSignature longName(std::string(100, 'x'), "float32", 1);  // cut to fit, never overrun
  EXPECT_EQ(longName.describe().substr(0, 31), std::string(31, 'x'));
  EXPECT_TRUE(allreduceOf(5) == allreduceOf(5));
  EXPECT_FALSE(allreduceOf(5) == allreduceOf(6));
}

}  // namespace
}  // namespace hier::transport
