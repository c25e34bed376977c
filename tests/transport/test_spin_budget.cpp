// The spin a wait takes before it sleeps follows what waking a sleeper costs (transport/spin_budget.h).
// The estimate is process-wide: each test first drives it to a known value with samples of its own.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "transport/arena/shared_counter.h"
#include "transport/base/settings.h"
#include "transport/base/spin_budget.h"

using namespace hier::transport;
using namespace std::chrono_literals;

namespace {

void settleAt(std::chrono::nanoseconds wakeUp) {
  for (int i = 0; i < 80; ++i) noteWakeUp(wakeUp);
}

// Waits on `counter` for `value`, which another thread posts once the waiter sleeps on the futex (after
// its spin: at most kMostSpin).
void waitAsleep(SharedCounter& counter, uint32_t value, bool learn) {
  static const std::atomic<bool> never{false};
  std::thread poster([&] {
    while (counter.sleepers.load() == 0) std::this_thread::sleep_for(100us);
    std::this_thread::sleep_for(2ms);
    counter.post(value);
  });
  EXPECT_TRUE(counter.waitFor(value, Clock::now() + 10s, never, learn));
  poster.join();
}

}  // namespace

TEST(SpinBudget, SpinsTwiceTheRecentWakeUpBetweenItsBounds) {
  if (settings().spinFixed) GTEST_SKIP() << "HIER_SPIN_US is set: the spin is fixed, not learned";
  settleAt(400us);
  EXPECT_NEAR(double(wakeUpEstimate().count()), 400e3, 1e3);
  EXPECT_NEAR(double(spinBudget().count()), 800, 2);
  settleAt(5ms);  // a host that wakes a thread in 5 ms: spinning that long would burn a core
  EXPECT_EQ(spinBudget(), kMostSpin);
  settleAt(2us);  // bare metal
  EXPECT_EQ(spinBudget(), kLeastSpin);
  EXPECT_EQ(leastSpin(), kLeastSpin);
}

TEST(SpinBudget, OneSlowWakeUpMovesTheSpinAQuarterOfTheWay) {
  settleAt(100us);
  noteWakeUp(500us);
  EXPECT_NEAR(double(wakeUpEstimate().count()), 200e3, 1e3);
}

TEST(SpinBudget, TheTimeAThreadWaitedForACpuIsReadAndNeverShrinks) {
  const auto first = runnableWaitSoFar();
  ASSERT_GE(first.count(), 0) << "/proc/thread-self/schedstat could not be read";
  std::this_thread::sleep_for(1ms);
  EXPECT_GE(runnableWaitSoFar(), first);
}

TEST(SpinBudget, AWaiterWokenByAPostMeasuresItsWakeUp) {
  // A counter in this process's memory: the futex works the same, shared or not.
  static SharedCounter counter{};
  // A wake-up estimate no real one comes near, so that the waiter's sample pulls it down.
  settleAt(40ms);
  waitAsleep(counter, 1, /*learn=*/true);
  EXPECT_LT(wakeUpEstimate(), 31ms) << "the wake-up was not measured";

  // A wait that never sleeps (the value is there already) measures nothing, nor one that does not learn
  // (its arena's ranks share CPUs).
  const auto before = wakeUpEstimate();
  static const std::atomic<bool> never{false};
  EXPECT_TRUE(counter.waitFor(1, Clock::now() + 10s, never, /*learn=*/true));
  EXPECT_EQ(wakeUpEstimate(), before);
  waitAsleep(counter, 2, /*learn=*/false);
  EXPECT_EQ(wakeUpEstimate(), before);
}
