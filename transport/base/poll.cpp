#include "transport/base/poll.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "transport/base/error.h"

namespace hier::transport {

void pollUntil(const std::function<bool()>& ready, const Deadline& deadline, const std::function<bool()>& stop,
               const std::string& what) {
  std::chrono::microseconds nap{20};
  while (!ready()) {
    if (stop()) throw Error(ErrorKind::Aborted, what + ": given up, the group is aborted or closing");
    if (deadline.passed()) throw Error(ErrorKind::Timeout, what + " " + deadline.timedOut());
    std::this_thread::sleep_for(
        std::min(nap, std::chrono::duration_cast<std::chrono::microseconds>(deadline.when - Clock::now())));
    nap = std::min<std::chrono::microseconds>(2 * nap, std::chrono::milliseconds(1));
  }
}

}  // namespace hier::transport
