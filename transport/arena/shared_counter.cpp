#include "transport/arena/shared_counter.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

#include "transport/base/process_watch.h"
#include "transport/base/spin_budget.h"

namespace hier::transport {
namespace {

// Shared (not process-private) futexes: the word lives in memory several processes map.
long futex(const std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), op, value, timeout, nullptr, 0);
}

constexpr auto kTick = std::chrono::milliseconds(100);

}  // namespace

void SharedCounter::post(uint32_t newValue) {
  value.store(newValue, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) {
    // Stamped after the value: a waiter that saw the value without sleeping reads no stamp, and one the
    // wake below wakes finds it set (or a later post's, which only makes its wake-up look shorter).
    postedAt.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    futex(&value, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void SharedCounter::wake() const { futex(&value, FUTEX_WAKE, INT_MAX, nullptr); }

bool SharedCounter::waitFor(uint32_t target, Clock::time_point deadline, const std::atomic<bool>& abandon, bool learn,
                            int poster) const {
  if (reached(target)) return true;
  const auto spin = learn ? spinBudget() : leastSpin();
  // Spin first: the peer usually posts within microseconds. Yield now and then, for oversubscribed hosts.
  // The spin's clock starts at the first yield: a peer running on another core mostly posts before, and
  // a wait that ends there reads no clock at all.
  Clock::time_point spinUntil{};
  for (unsigned i = 1;; ++i) {
    if (reached(target)) return true;
    if (i % 64 == 0) {
      const auto now = Clock::now();
      if (spinUntil == Clock::time_point{}) {
        spinUntil = now + spin;
      } else if (now >= spinUntil) {
        break;
      }
      sched_yield();
    }
  }
  auto& self = const_cast<SharedCounter&>(*this);
  for (;;) {
    auto now = Clock::now();
    if (now >= deadline || abandon.load()) return reached(target);
    auto wait = std::min<Clock::duration>(deadline - now, kTick);
    timespec timeout{};
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    timeout.tv_sec = time_t(ns / 1000000000);
    timeout.tv_nsec = long(ns % 1000000000);
    self.sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint32_t seen = value.load(std::memory_order_seq_cst);
    bool woken = false, sleptWholeTick = false;
    const auto runnableBefore = learn ? runnableWaitSoFar() : std::chrono::nanoseconds(-1);
    if (int32_t(seen - target) < 0 && !abandon.load()) {
      const long slept = futex(&value, FUTEX_WAIT, seen, &timeout);
      woken = slept == 0;
      sleptWholeTick = slept != 0 && errno == ETIMEDOUT;
    }
    self.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(target)) {
      // Woken by the post it waited for (a post stamped after this thread went to sleep): how long
      // waking took here, less any wait for a CPU, sets how long waits spin (spin_budget.h).
      const auto stamp = Clock::time_point(Clock::duration(postedAt.load(std::memory_order_acquire)));
      if (woken && stamp >= now && runnableBefore.count() >= 0) {
        const auto latency = Clock::now() - stamp;
        noteWakeUp(latency - (runnableWaitSoFar() - runnableBefore));
      }
      return true;
    }
    // The poster may have posted and then ended: the value, read after, has the last word.
    if (sleptWholeTick && processEnded(poster)) return reached(target);
  }
}

}  // namespace hier::transport
