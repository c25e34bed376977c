// How long a waiting thread polls before it goes to sleep (HIER_SPIN_US): time spent polling, not time
// spent with the core handed over.
//
// A thread that polls yields now and then, so that with more ranks than cores the peer it waits for
// gets the core. On a host with a core per rank a yield returns at once: the thread polls for the
// budget and sleeps. With more ranks than cores a yield hands the core over, often for as long as the
// peer needs to post what the waiter waits for; that time is not counted, so the waiter is still polling
// when its turn comes back and sees the result then, instead of sleeping and being woken (a wake-up on a
// busy core costs a scheduling round: 2 simulated hosts x 2 ranks on 2 cores, a pipelined 560 KB
// allreduce in 9 fragments took 10-13 ms with a budget of clock time, 4-6 ms with this one). The
// uncounted time is capped at kMaxStretch budgets, so ranks that only yield to one another (all waiting
// for a straggler elsewhere) still go to sleep soon.
//
// The clock is read around each yield (steady_clock: the vDSO, 28 ns here). A yield that keeps the core
// takes about 0.6 µs, one that hands it over and gets it back several. The thread's own CPU clock would
// tell the same directly, but reading it is a system call (0.6 µs), on every wait.
#pragma once

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "transport/deadline.h"

namespace hier::transport {

class SpinBudget {
 public:
  explicit SpinBudget(std::chrono::microseconds budget)
      : until_(Clock::now() + budget), latest_(until_ + (kMaxStretch - 1) * budget) {}

  // Called every few dozen polls: false once the budget is spent, else yields the core and returns true.
  bool yield() {
    const auto before = Clock::now();
    if (before >= until_) return false;
    sched_yield();
    const auto away = Clock::now() - before;
    // Longer than a yield that returns at once: another thread had the core meanwhile.
    if (away > kHandedOver) until_ = std::min(until_ + away, latest_);
    return true;
  }

 private:
  static constexpr int kMaxStretch = 40;
  static constexpr auto kHandedOver = std::chrono::microseconds(2);
  Clock::time_point until_;
  const Clock::time_point latest_;
};

}  // namespace hier::transport
