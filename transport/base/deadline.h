// When an operation must be done by. Every wait in the transport takes one: a collective's, a shared-
// memory setup's, a NCCL communicator's, a staging copy's. It keeps the timeout it came from, so an
// error can say "timed out after 30000 ms" rather than name a clock reading.
#pragma once

#include <algorithm>
#include <chrono>
#include <string>

namespace hier::transport {

using Clock = std::chrono::steady_clock;

struct Deadline {
  Clock::time_point when = Clock::time_point::max();
  std::chrono::milliseconds timeout{0};  // what `when` was computed from; 0 with `when` max: none

  // `timeout` from now; a timeout <= 0 means no deadline.
  static Deadline after(std::chrono::milliseconds timeout) { return after(timeout, Clock::now()); }
  // The same, from `start`: a clock reading the caller has already made.
  static Deadline after(std::chrono::milliseconds timeout, Clock::time_point start) {
    if (timeout.count() <= 0) return {};
    return {start + timeout, timeout};
  }
  static Deadline never() { return {}; }

  bool bounded() const { return when != Clock::time_point::max(); }
  bool passed() const { return bounded() && Clock::now() >= when; }
  // What is left, at least 1 ms (a wait of 0 means "don't wait" to some APIs, "forever" to others);
  // a year when there is no deadline.
  std::chrono::milliseconds remaining() const {
    if (!bounded()) return std::chrono::hours(24 * 365);
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(when - Clock::now()));
  }
  // How every timeout error starts: "timed out after 30000 ms" ("timed out" where there was none).
  std::string timedOut() const { return timedOutAfter(timeout); }
  static std::string timedOutAfter(std::chrono::milliseconds timeout) {
    return timeout.count() > 0 ? "timed out after " + std::to_string(timeout.count()) + " ms" : "timed out";
  }
};

}  // namespace hier::transport
