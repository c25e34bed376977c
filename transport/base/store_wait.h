// Waiting in the store for what another rank publishes there, as a communicator's setup does: which host
// a rank is on, the shared-memory arena's steps. A rank that died, or that gave up (its failure notice
// aborts this communicator), publishes nothing more, and a plain wait would hold this rank to the
// deadline, torch's 30 minutes by default.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "transport/base/bootstrap.h"
#include "transport/base/deadline.h"

namespace hier::transport {

// What such a wait looks at between its looks in the store (at most settings().progressTick apart)
// besides the deadline, each optional.
struct PeerWatch {
  std::function<std::string()> abortReason;    // why the communicator was aborted; "" while it was not
  std::function<bool(int rank)> processEnded;  // whether `rank`'s process has ended, looked at now
};

// Returns the value of `key`, which rank `from` (named `name` in messages) publishes. Throws:
//  - Error(Timeout) naming `name` once the deadline passed: "timed out after N ms waiting for rank
//    <name><waitingFor>" followed by `ifLate` (what a rank that never came tells the user);
//  - Error(Aborted) with the abort's reason once the watch sees one;
//  - Error(PeerFailure) naming `name` once it sees `from`'s process ended without the key: "rank <name>'s
//    process ended while this rank waited for it<waitingFor>".
std::vector<uint8_t> awaitPublished(Bootstrap& bootstrap, const std::string& key, int from, int name,
                                    const Deadline& deadline, const PeerWatch& watch, const std::string& waitingFor,
                                    const std::string& ifLate = "");

}  // namespace hier::transport
