// UCX's status codes as the transport's errors; for the engine's files only.
#pragma once

#include <ucp/api/ucp.h>

#include <string>

#include "transport/base/error.h"

namespace hier::transport::ucx {

[[noreturn]] inline void raise(const std::string& what, ucs_status_t status) {
  throw Error(ErrorKind::Internal, "UCX: " + what + " failed: " + ucs_status_string(status));
}

inline ErrorKind kindOf(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_CANCELED: return ErrorKind::Aborted;
    case UCS_ERR_MESSAGE_TRUNCATED: return ErrorKind::Mismatch;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:  // posted on an endpoint UCX already closed for a failure
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR: return ErrorKind::PeerFailure;
    default: return ErrorKind::Internal;
  }
}

}  // namespace hier::transport::ucx
