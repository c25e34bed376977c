#include "transport/base/spin_budget.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "transport/base/settings.h"

namespace hier::transport {
namespace {

// The recent wake-up latency, in nanoseconds: a moving average that follows a quarter of each new
// sample, so that one slow wake-up does not set the spin for good, nor one fast one undo a slow host.
std::atomic<int64_t> wakeUpNanos{0};

}  // namespace

std::chrono::nanoseconds wakeUpEstimate() {
  return std::chrono::nanoseconds(wakeUpNanos.load(std::memory_order_relaxed));
}

std::chrono::microseconds leastSpin() { return settings().spinFixed ? settings().spin : kLeastSpin; }

std::chrono::microseconds spinBudget() {
  if (settings().spinFixed) return settings().spin;
  const auto twice = std::chrono::duration_cast<std::chrono::microseconds>(2 * wakeUpEstimate());
  return std::clamp(twice, kLeastSpin, kMostSpin);
}

std::chrono::nanoseconds runnableWaitSoFar() {
  // "<ns on a CPU> <ns runnable, waiting for one> <time slices>"; the file stays open for the thread.
  struct File {
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    ~File() {
      if (fd >= 0) close(fd);
    }
  };
  thread_local File file;
  char text[96];
  const ssize_t got = file.fd < 0 ? -1 : pread(file.fd, text, sizeof text - 1, 0);
  if (got <= 0) return std::chrono::nanoseconds(-1);
  text[got] = '\0';
  char* end = nullptr;
  std::strtoll(text, &end, 10);
  return std::chrono::nanoseconds(std::strtoll(end, nullptr, 10));
}

void noteWakeUp(std::chrono::nanoseconds latency) {
  const int64_t sample = std::max<int64_t>(0, latency.count());
  int64_t seen = wakeUpNanos.load(std::memory_order_relaxed);
  // Lost updates between threads are harmless: each writes a value between the old and its sample.
  wakeUpNanos.store(seen + (sample - seen) / 4, std::memory_order_relaxed);
}

}  // namespace hier::transport
