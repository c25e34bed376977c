#include "transport/base/store_wait.h"

#include <algorithm>
#include <thread>

#include "transport/base/error.h"
#include "transport/base/settings.h"

namespace hier::transport {

std::vector<uint8_t> awaitPublished(Bootstrap& bootstrap, const std::string& key, int from, int name,
                                    const Deadline& deadline, const PeerWatch& watch, const std::string& waitingFor,
                                    const std::string& ifLate) {
  const auto late = [&] {
    return Error(ErrorKind::Timeout,
                 deadline.timedOut() + " waiting for rank " + std::to_string(name) + waitingFor + ifLate, {name});
  };
  if (!watch.abortReason && !watch.processEnded) {
    try {
      return bootstrap.get(key, deadline.remaining());
    } catch (const Error& error) {
      if (error.kind() != ErrorKind::Timeout) throw;
      throw late();
    }
  }
  // Polled, not waited for tick by tick: torch's TCPStore logs a warning for every wait that times out
  // (torch 2.15: two lines each), so a rank 1.5 s late filled its peer's log with 26 lines. The pause
  // doubles from 1 ms up to the tick: a key published t after the first look is seen by about 2t.
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (bootstrap.check({key})) return bootstrap.get(key, deadline.remaining());
    if (deadline.passed()) throw late();
    if (watch.abortReason) {
      if (std::string why = watch.abortReason(); !why.empty()) throw Error(ErrorKind::Aborted, why);
    }
    if (watch.processEnded && watch.processEnded(from)) {
      // It may have published just before it ended: the store has the last word.
      if (bootstrap.check({key})) continue;
      throw Error(ErrorKind::PeerFailure,
                  "rank " + std::to_string(name) + "'s process ended while this rank waited for it" + waitingFor,
                  {name});
    }
    std::this_thread::sleep_for(std::min(pause, deadline.remaining()));
    pause = std::min(pause * 2, settings().progressTick);
  }
}

}  // namespace hier::transport
