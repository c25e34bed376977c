// A counter in memory shared between the processes of one host, that one process advances and others
// wait on: spinning, then asleep on a futex, never past a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "transport/base/deadline.h"

namespace hier::transport {

// Lives in shared memory (standard layout, no constructor run by the mapping processes: zero is a
// valid initial state). Values wrap around at 2^32; comparisons are wrap-safe.
struct alignas(64) SharedCounter {
  std::atomic<uint32_t> value;
  std::atomic<uint32_t> sleepers;
  // When the last post was made (steady clock nanoseconds, the same clock in every process of a host):
  // what a waiter it woke measures its wake-up against.
  std::atomic<int64_t> postedAt;

  // Sets the value and wakes the processes asleep on it.
  void post(uint32_t newValue);
  // Wakes every process asleep on it without changing the value: they look at their reasons to stop
  // waiting again (an abandoned arena).
  void wake() const;
  // Returns once value >= target (wrap-safe). Returns false when `deadline` passes first, or when
  // `abandon` becomes true: at once when the one who set it calls wake(), else within a 100 ms tick (a
  // wake that falls between the check and the sleep is lost). `poster`: a pidfd of the process that
  // advances the counter, or -1; once that process has ended, returns false within a tick. (It is looked
  // at only after a whole tick asleep: a wait that ends sooner costs no system call more.) `learn`: spin
  // for as long as spinBudget() says and tell it how long a wake-up took (spin_budget.h), where every
  // rank has a CPU of its own; else spin the least (a woken rank's wait for a CPU is no wake-up cost,
  // and a longer spin would only lengthen it).
  bool waitFor(uint32_t target, Clock::time_point deadline, const std::atomic<bool>& abandon, bool learn,
               int poster = -1) const;
  bool reached(uint32_t target) const { return int32_t(value.load(std::memory_order_acquire) - target) >= 0; }
};

static_assert(sizeof(SharedCounter) == 64);

}  // namespace hier::transport
