#include "transport/store_wait.h"

#include <algorithm>

#include "transport/error.h"
#include "transport/settings.h"

namespace hier::transport {

std::vector<uint8_t> awaitPublished(Bootstrap& bootstrap, const std::string& key, int from, int name,
                                    const Deadline& deadline, const PeerWatch& watch, const std::string& waitingFor,
                                    const std::string& ifLate) {
  const bool watching = watch.abortReason || watch.processEnded;
  for (;;) {
    try {
      return bootstrap.get(key, watching ? std::min(deadline.remaining(), settings().progressTick)
                                         : deadline.remaining());
    } catch (const Error& error) {
      if (error.kind() != ErrorKind::Timeout) throw;
    }
    if (!watching || deadline.passed()) {
      throw Error(ErrorKind::Timeout,
                  deadline.timedOut() + " waiting for rank " + std::to_string(name) + waitingFor + ifLate, {name});
    }
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
  }
}

}  // namespace hier::transport
