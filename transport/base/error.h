// The one exception type the transport throws. The plugin turns it into a c10d error whose message
// names the group, the operation and its sequence number.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace hier::transport {

enum class ErrorKind {
  InvalidUsage,  // the caller asked for something impossible; nothing was sent
  Timeout,       // the deadline passed before the peers in peers() answered
  PeerFailure,   // a peer's connection failed (it died or its network went away)
  Mismatch,      // a peer sent a different size than this rank expected
  Aborted,       // the communicator was aborted or shut down
  Internal,      // UCX or the system refused something it should not have
};

const char* toString(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what, std::vector<int> peers = {})
      : std::runtime_error(what), kind_(kind), peers_(std::move(peers)) {}

  ErrorKind kind() const { return kind_; }
  // Ranks (in the communicator) this error concerns: the ones that did not answer, failed or mismatched.
  const std::vector<int>& peers() const { return peers_; }

 private:
  ErrorKind kind_;
  std::vector<int> peers_;
};

}  // namespace hier::transport
