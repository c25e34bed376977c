// The agreement a collective runs before it moves data (transport/agreement.h), on real processes: the
// same outcome on every rank, at every group size (1, 2, 3, 5: odd sizes wrap the dissemination rounds),
// whether all agree, one rank differs, or some ranks refuse; both ways: through the boards of the
// ranks' shared-memory arena (all on one host) and in messages (each rank on a simulated host of its own).
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/transport/multiprocess.h"
#include "transport/agreement/agreement.h"
#include "transport/group/collective.h"
#include "transport/group/group.h"

namespace hier::transport {
namespace {

using std::chrono::milliseconds;
using testing::RankContext;
using testing::runRanks;

CallSignature allreduceOf(uint64_t elements) {
  CallSignature s("allreduce", "float32", elements);
  s.setReduceOp("SUM");
  return s;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

enum class Way { Boards, Messages };

// (group size, way)
class Agreement : public ::testing::TestWithParam<std::tuple<int, Way>> {};

// Sets up this rank's host for the way under test (in the rank's own process), and checks, once the group
// exists, that the agreement will take that way: the boards when the ranks share an arena.
void placeFor(Way way, const RankContext& ctx) {
  if (way == Way::Messages) setenv("HIER_HOST_ID", ("agreement-host-" + std::to_string(ctx.rank)).c_str(), 1);
}
void checkWay(Way way, Group& group) {
  if (group.size() == 1) return;
  const bool boards = group.arena(Deadline::after(milliseconds(10000))) != nullptr;
  HIER_CHECK(boards == (way == Way::Boards), std::string("the ranks ") + (boards ? "share" : "do not share") +
                                                 " an arena, so the agreement does not take the way under test");
}

TEST_P(Agreement, EveryRankLearnsTheSameOutcome) {
  const auto [size, way] = GetParam();
  auto failures = runRanks(size, [way](const RankContext& ctx) {
    placeFor(way, ctx);
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    checkWay(way, group);
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

// Rank `rank`'s piece of `bytes` bytes: different on every rank and at every offset.
std::vector<std::byte> pieceOf(int rank, size_t bytes) {
  std::vector<std::byte> piece(bytes);
  for (size_t i = 0; i < bytes; ++i) piece[i] = std::byte((rank * 37 + i * 11 + 5) % 251);
  return piece;
}

TEST_P(Agreement, CarriesEveryRanksPieceOnlyWhenEveryRankCarriesOne) {
  const auto [size, way] = GetParam();
  auto failures = runRanks(size, [way](const RankContext& ctx) {
    placeFor(way, ctx);
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    checkWay(way, group);
    const int last = ctx.size - 1;
    const size_t limit = carryLimit(ctx.size);
    HIER_CHECK(limit > 1000, "HIER_CARRY_BYTES leaves " + std::to_string(limit) + " bytes a rank");
    uint64_t sequence = 0;
    auto next = [&] { return Collective(group, sequence++, milliseconds(10000)); };
    const CallSignature mine = allreduceOf(7);
    // Each rank's size differs (the last's is the limit, rank 0's may be empty), and comes in two parts.
    auto sizeOf = [&](int rank) { return rank == last ? limit : size_t(rank) * 97; };
    auto partsOf = [](const std::vector<std::byte>& piece) {
      const size_t half = piece.size() / 2;
      return std::vector<std::span<const std::byte>>{std::span(piece).first(half), std::span(piece).subspan(half)};
    };

    {  // everyone carries: everyone ends with every piece, byte for byte
      auto c = next();
      const auto piece = pieceOf(ctx.rank, sizeOf(ctx.rank));
      const auto parts = partsOf(piece);
      auto outcome = agree(c, &mine, {}, parts);
      HIER_CHECK(outcome.agreed() && outcome.carried,
                 outcome.describe() + " (carried: " + std::to_string(outcome.carried.has_value()) + ")");
      HIER_CHECK(outcome.carried->size() == ctx.size,
                 "pieces of " + std::to_string(outcome.carried->size()) + " ranks");
      for (int r = 0; r < ctx.size; ++r) {
        const auto want = pieceOf(r, sizeOf(r));
        const auto got = outcome.carried->piece(r);
        HIER_CHECK(got.size() == want.size() && std::equal(got.begin(), got.end(), want.begin()),
                   "rank " + std::to_string(r) + "'s piece arrived wrong (" + std::to_string(got.size()) + " bytes)");
        HIER_CHECK(reinterpret_cast<uintptr_t>(got.data()) % 64 == 0, "a piece is not 64-byte aligned");
      }
    }
    {  // the last rank's piece is one byte too many: nobody uses the pieces, and the call still agrees
      auto c = next();
      const auto piece = pieceOf(ctx.rank, ctx.rank == last ? limit + 1 : 10);
      const auto parts = partsOf(piece);
      auto outcome = agree(c, &mine, {}, parts);
      HIER_CHECK(outcome.agreed() && (ctx.size == 1 || !outcome.carried), "carried with a piece over the limit");
    }
    if (ctx.size > 1) {  // rank 0 carries nothing (a collective too big for it): nobody uses the pieces
      auto c = next();
      const auto piece = pieceOf(ctx.rank, 10);
      const auto parts = partsOf(piece);
      auto outcome = agree(c, &mine, {}, ctx.rank == 0 ? std::nullopt : std::optional<PieceParts>(parts));
      HIER_CHECK(outcome.agreed() && !outcome.carried, "carried although rank 0 carried nothing");
    }
    if (ctx.size > 1) {  // the ranks disagree: the disagreement, never the pieces
      auto c = next();
      const CallSignature other = allreduceOf(ctx.rank == last ? 8 : 7);
      const auto piece = pieceOf(ctx.rank, 10);
      const auto parts = partsOf(piece);
      auto outcome = agree(c, &other, {}, parts);
      HIER_CHECK(!outcome.agreed() && !outcome.carried, outcome.describe());
    }
    {  // the last rank refuses while the others carry
      auto c = next();
      const auto piece = pieceOf(ctx.rank, 10);
      const auto parts = partsOf(piece);
      auto outcome = ctx.rank == last ? agree(c, nullptr, "no") : agree(c, &mine, {}, parts);
      HIER_CHECK(outcome.refusingRank == last && !outcome.carried, outcome.describe());
    }
    {  // empty pieces are pieces too
      auto c = next();
      const std::vector<std::span<const std::byte>> nothing;
      auto outcome = agree(c, &mine, {}, nothing);
      HIER_CHECK(outcome.agreed() && outcome.carried && outcome.carried->piece(last).empty(), outcome.describe());
    }
  });
  EXPECT_EQ(failures, "");
}

// A rooted collective's pieces: only the root's has bytes, and with the total known it rides up to
// HIER_CARRY_BYTES, beyond carryLimit(); ranks that disagree on the root each carry that much at once,
// which no message may overrun, and learn of their disagreement.
TEST_P(Agreement, RootedPiecesRideUpToTheirKnownTotal) {
  const auto [size, way] = GetParam();
  auto failures = runRanks(size, [way](const RankContext& ctx) {
    placeFor(way, ctx);
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    checkWay(way, group);
    const size_t whole = carryLimit(1);  // HIER_CARRY_BYTES, within kMaxCarryBytes
    HIER_CHECK(whole > 1000, "HIER_CARRY_BYTES is " + std::to_string(whole));
    uint64_t sequence = 0;
    auto next = [&] { return Collective(group, sequence++, milliseconds(10000)); };
    auto rootedAt = [](int root) {
      CallSignature s("broadcast", "uint8", 0);
      s.root = root;
      return s;
    };
    const int root = ctx.size / 2;
    const auto rootPiece = pieceOf(root, whole);
    const std::vector<std::span<const std::byte>> nothing;
    auto mineFor = [&](int r) {
      return ctx.rank == r ? std::vector<std::span<const std::byte>>{std::span(rootPiece)} : nothing;
    };

    {  // the whole carry in one piece, within its total: every rank has it, byte for byte
      auto c = next();
      const CallSignature mine = rootedAt(root);
      auto outcome = agree(c, &mine, {}, mineFor(root), whole);
      HIER_CHECK(outcome.agreed() && outcome.carried, outcome.describe() + " (not carried)");
      for (int r = 0; r < ctx.size; ++r) {
        const auto got = outcome.carried->piece(r);
        if (r != root) {
          HIER_CHECK(got.empty(), "rank " + std::to_string(r) + " carried " + std::to_string(got.size()) + " bytes");
          continue;
        }
        HIER_CHECK(got.size() == whole && std::equal(got.begin(), got.end(), rootPiece.begin()),
                   "the root's piece arrived wrong (" + std::to_string(got.size()) + " bytes)");
      }
    }
    {  // a total one byte over: nobody carries, and the call still agrees
      auto c = next();
      const CallSignature mine = rootedAt(root);
      auto outcome = agree(c, &mine, {}, mineFor(root), whole + 1);
      HIER_CHECK(outcome.agreed() && (ctx.size == 1 || !outcome.carried), "carried beyond the total's limit");
    }
    if (ctx.size > 1) {  // every rank takes itself for the root: the disagreement, never the pieces
      auto c = next();
      const CallSignature mine = rootedAt(ctx.rank);
      const auto own = pieceOf(ctx.rank, whole);
      const std::vector<std::span<const std::byte>> parts{std::span(own)};
      auto outcome = agree(c, &mine, {}, parts, whole);
      HIER_CHECK(!outcome.agreed() && !outcome.carried, outcome.describe());
    }
    {  // and the group goes on
      auto c = next();
      const CallSignature mine = rootedAt(root);
      auto outcome = agree(c, &mine, {}, mineFor(root), whole);
      HIER_CHECK(outcome.agreed() && outcome.carried && outcome.carried->piece(root).size() == whole,
                 outcome.describe());
    }
  });
  EXPECT_EQ(failures, "");
}

// Eight ranks in messages, each taking itself for the root of a broadcast as large as HIER_CARRY_BYTES:
// the round at distance 4 would carry four such pieces, more than any message holds. The senders carry
// none then, and every rank learns of the disagreement; the group goes on.
TEST(AgreementMessages, DisagreeingRootsNeverOverrunAMessage) {
  auto failures = runRanks(8, [](const RankContext& ctx) {
    placeFor(Way::Messages, ctx);
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    checkWay(Way::Messages, group);
    const size_t whole = carryLimit(1);
    HIER_CHECK(3 * whole > kMaxCarryBytes, "HIER_CARRY_BYTES is too small for this test: " + std::to_string(whole));
    CallSignature mine("broadcast", "uint8", whole);
    mine.root = ctx.rank;
    const auto own = pieceOf(ctx.rank, whole);
    const std::vector<std::span<const std::byte>> parts{std::span(own)};
    {
      Collective c(group, 0, milliseconds(10000));
      auto outcome = agree(c, &mine, {}, parts, whole);
      HIER_CHECK(!outcome.agreed() && !outcome.carried, outcome.describe());
      HIER_CHECK(contains(outcome.describe(), "root 0") && contains(outcome.describe(), "root 7"), outcome.describe());
    }
    mine.root = 3;
    const std::vector<std::span<const std::byte>> nothing;
    Collective c(group, 1, milliseconds(10000));
    auto outcome = agree(c, &mine, {}, ctx.rank == 3 ? parts : nothing, whole);
    HIER_CHECK(outcome.agreed() && outcome.carried && outcome.carried->piece(3).size() == whole, outcome.describe());
  });
  EXPECT_EQ(failures, "");
}

// Back to back, with ranks held up in turn, so that fast ranks run ahead of slow ones: a board is never
// written again before every rank has read it, and messages never mix up two agreements.
TEST_P(Agreement, BackToBackAgreementsKeepApart) {
  const auto [size, way] = GetParam();
  auto failures = runRanks(size, [way](const RankContext& ctx) {
    placeFor(way, ctx);
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    const size_t bytes = std::min<size_t>(carryLimit(ctx.size), 256);
    for (uint64_t i = 0; i < 300; ++i) {
      const bool heldUp = i % uint64_t(ctx.size) == uint64_t(ctx.rank) && i % 7 == 0;
      if (heldUp) std::this_thread::sleep_for(std::chrono::microseconds(200));
      Collective c(group, i, milliseconds(10000));
      const CallSignature mine = allreduceOf(i);  // a signature of its own: a mix-up is a disagreement
      const auto piece = pieceOf(ctx.rank + int(i), bytes);
      const std::vector<std::span<const std::byte>> parts{std::span(piece)};
      auto outcome = agree(c, &mine, {}, parts);
      HIER_CHECK(outcome.agreed() && outcome.carried, "agreement " + std::to_string(i) + ": " + outcome.describe());
      for (int r = 0; r < ctx.size; ++r) {
        const auto want = pieceOf(r + int(i), bytes);
        const auto got = outcome.carried->piece(r);
        HIER_CHECK(got.size() == want.size() && std::equal(got.begin(), got.end(), want.begin()),
                   "agreement " + std::to_string(i) + ": rank " + std::to_string(r) + "'s piece arrived wrong");
      }
    }
    // The first agreement went in messages and set the arena up: all the others went through the boards.
    HIER_CHECK((group.arenaIfReady() != nullptr) == (way == Way::Boards && ctx.size > 1),
               "the first agreement did not leave the arena the way under test needs");
  });
  EXPECT_EQ(failures, "");
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, Agreement,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 6),
                                            ::testing::Values(Way::Boards, Way::Messages)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) == Way::Boards ? "boards" : "messages");
                         });

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

TEST(PieceMemory, ReusesTheLargestBlockItsThreadLetGo) {
  auto aligned = [](const PieceMemory& m) { return reinterpret_cast<uintptr_t>(m.data()) % 64 == 0; };
  std::byte* first;
  {
    PieceMemory m(1000);
    EXPECT_TRUE(aligned(m));
    EXPECT_GE(m.capacity(), 1000u);
    first = m.data();
  }
  {
    PieceMemory smaller(100);  // fits in the block let go of: no heap request
    EXPECT_EQ(smaller.data(), first);
    PieceMemory second(100);  // the spare is taken: a block of its own
    EXPECT_NE(second.data(), first);
    EXPECT_TRUE(aligned(second));
  }
  PieceMemory larger(64 * 1024);  // more than the spare holds
  EXPECT_GE(larger.capacity(), 64u * 1024);
  EXPECT_TRUE(aligned(larger));
  std::memset(larger.data(), 1, larger.capacity());  // all of it is there (ASan checks)
  PieceMemory moved = std::move(larger);
  EXPECT_EQ(larger.data(), nullptr);
  EXPECT_NE(moved.data(), nullptr);
}

}  // namespace
}  // namespace hier::transport
