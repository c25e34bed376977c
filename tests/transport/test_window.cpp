// One-sided windows (transport/window/window.h) without torch: puts land at their offsets and nowhere
// else, a signal follows the puts before it, early signals are kept, a put that does not fit is refused
// before anything moves, and a wait for a signal that never comes fails at its deadline.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/transport/multiprocess.h"
#include "transport/base/error.h"
#include "transport/group/group.h"
#include "transport/window/window.h"

namespace hier::transport {
namespace {

using testing::RankContext;
using testing::runRanks;

constexpr auto kTimeout = std::chrono::seconds(20);

// Every rank's descriptor through the bootstrap: what the plugin does with its allgather.
void connect(Window& window, const RankContext& ctx, const std::string& name) {
  ctx.bootstrap->set(name + "/" + std::to_string(ctx.rank), window.descriptor());
  std::vector<std::vector<uint8_t>> all;
  for (int rank = 0; rank < ctx.size; ++rank) {
    all.push_back(ctx.bootstrap->get(name + "/" + std::to_string(rank), kTimeout));
  }
  window.connect(all, Deadline::after(kTimeout));
}

void settle(const std::shared_ptr<Transfer>& transfer, const std::string& what) {
  transfer->wait();
  const auto outcome = transfer->outcome();
  HIER_CHECK(outcome.succeeded, what << ": " << outcome.message);
}

// Rank r puts 3 values into every other rank's window at offset 4 r + r (uneven), then one rank waits for
// everyone's signal and checks every slot, including the ones nobody wrote.
TEST(Window, PutsLandAtTheirOffsetsOnEveryRank) {
  auto failures = runRanks(3, [](const RankContext& ctx) {
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "w");
    std::vector<int64_t> mine(size_t(5 * ctx.size + ctx.rank), -1);
    Window window(group.communicator(), 0, mine.data(), mine.size() * sizeof(int64_t));
    connect(window, ctx, "w");
    auto values = std::make_shared<std::vector<int64_t>>();
    for (int i = 0; i < 3; ++i) values->push_back(100 * ctx.rank + i);
    std::vector<std::shared_ptr<Transfer>> puts;
    for (int peer = 0; peer < ctx.size; ++peer) {
      if (peer == ctx.rank) continue;
      HIER_CHECK(window.bytesOf(peer) == size_t(5 * ctx.size + peer) * sizeof(int64_t), "peer " << peer);
      puts.push_back(window.put(values->data(), values->size() * sizeof(int64_t), peer,
                                size_t(5 * ctx.rank) * sizeof(int64_t), values, Deadline::after(kTimeout), nullptr));
    }
    for (int peer = 0; peer < ctx.size; ++peer) {
      if (peer != ctx.rank) settle(window.waitSignal(peer, Deadline::after(kTimeout), nullptr), "wait");
    }
    for (auto& put : puts) settle(put, "put");
    for (size_t i = 0; i < mine.size(); ++i) {
      const int source = int(i) / 5, slot = int(i) % 5;
      const int64_t expected = source != ctx.rank && source < ctx.size && slot < 3 ? 100 * source + slot : -1;
      HIER_CHECK(mine[i] == expected, "element " << i << ": " << mine[i] << " where " << expected);
    }
  });
  EXPECT_EQ(failures, "");
}

// Rank 0 makes three puts and a signal before rank 1 waits at all: rank 1's four waits find them, and the
// data of all three puts is in place after the fourth.
TEST(Window, ASignalFollowsEarlierPutsAndEarlySignalsAreKept) {
  auto failures = runRanks(2, [](const RankContext& ctx) {
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "w");
    constexpr size_t kCount = 1 << 18;  // 1 MiB of floats a put: past UCX's eager sizes
    std::vector<float> mine(3 * kCount, 0.0f);
    Window window(group.communicator(), 7, mine.data(), mine.size() * sizeof(float));
    connect(window, ctx, "w");
    if (ctx.rank == 0) {
      std::vector<std::shared_ptr<Transfer>> sent;
      for (int i = 0; i < 3; ++i) {
        auto part = std::make_shared<std::vector<float>>(kCount, float(i + 1));
        sent.push_back(window.put(part->data(), kCount * sizeof(float), 1, i * kCount * sizeof(float), part,
                                  Deadline::after(kTimeout), nullptr));
      }
      sent.push_back(window.signal(1, Deadline::after(kTimeout), nullptr));
      for (auto& s : sent) settle(s, "rank 0's put or signal");
      ctx.bootstrap->set("sent", {1});
    } else {
      ctx.bootstrap->get("sent", kTimeout);
      for (int i = 0; i < 4; ++i) settle(window.waitSignal(0, Deadline::after(kTimeout), nullptr), "wait");
      for (size_t i = 0; i < mine.size(); ++i) {
        HIER_CHECK(mine[i] == float(i / kCount + 1), "element " << i << ": " << mine[i]);
      }
    }
  });
  EXPECT_EQ(failures, "");
}

TEST(Window, APutThatDoesNotFitIsRefusedAndAMissingSignalTimesOut) {
  auto failures = runRanks(2, [](const RankContext& ctx) {
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "w");
    std::vector<uint8_t> mine(64);
    Window window(group.communicator(), 0, mine.data(), mine.size());
    connect(window, ctx, "w");
    const int peer = 1 - ctx.rank;
    std::vector<uint8_t> source(16);
    try {
      window.put(source.data(), source.size(), peer, 60, nullptr, Deadline::after(kTimeout), nullptr);
      HIER_CHECK(false, "a put past the window's end was taken");
    } catch (const Error& error) {
      HIER_CHECK(error.kind() == ErrorKind::InvalidUsage, error.what());
      HIER_CHECK(std::string(error.what()).find("do not fit in the 64 bytes") != std::string::npos, error.what());
    }
    const auto start = Clock::now();
    auto wait = window.waitSignal(peer, Deadline::after(std::chrono::milliseconds(300)), nullptr);
    wait->wait();
    HIER_CHECK(!wait->outcome().succeeded && wait->outcome().kind == ErrorKind::Timeout, wait->outcome().message);
    HIER_CHECK(Clock::now() - start < std::chrono::seconds(5), "the deadline was not kept");
    // Both ranks are done waiting before either goes: no signal reaches a rank that has left.
    ctx.bootstrap->set("done/" + std::to_string(ctx.rank), {1});
    ctx.bootstrap->get("done/" + std::to_string(peer), kTimeout);
  });
  EXPECT_EQ(failures, "");
}

}  // namespace
}  // namespace hier::transport
