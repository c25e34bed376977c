#include "plugin/logging.hpp"

#include <c10/util/Logging.h>

#include <mutex>

namespace hier {

void installLogSink() {
  static std::once_flag once;
  std::call_once(once, [] {
    // When HIER_DEBUG asks for hier's INFO messages, c10 must not drop them.
    if (transport::logEnabled(transport::LogLevel::Info) && FLAGS_caffe2_log_level > 0) FLAGS_caffe2_log_level = 0;
    transport::setLogSink([](transport::LogLevel level, const std::string& message) {
      switch (level) {
        case transport::LogLevel::Debug:
        case transport::LogLevel::Info: LOG(INFO) << "[hier] " << message; break;
        case transport::LogLevel::Warning: LOG(WARNING) << "[hier] " << message; break;
        case transport::LogLevel::Error: LOG(ERROR) << "[hier] " << message; break;
      }
    });
  });
}

}  // namespace hier
