#include "transport/base/error.h"

namespace hier::transport {

const char* toString(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidUsage: return "invalid usage";
    case ErrorKind::Timeout: return "timeout";
    case ErrorKind::PeerFailure: return "peer failure";
    case ErrorKind::Mismatch: return "size mismatch";
    case ErrorKind::Aborted: return "aborted";
    case ErrorKind::Internal: return "internal error";
  }
  return "error";
}

}  // namespace hier::transport
