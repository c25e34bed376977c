// hier's log messages go through c10's logging (TORCH_CPP_LOG_LEVEL); HIER_DEBUG=INFO or DEBUG asks
// for hier's own informational messages, such as the groups made and the algorithms chosen.
#pragma once

#include <string>

#include "transport/base/log.h"

namespace hier {

// Routes the transport's messages to c10 logging. Idempotent.
void installLogSink();

inline void hierLog(transport::LogLevel level, const std::string& message) { transport::log(level, message); }

}  // namespace hier
