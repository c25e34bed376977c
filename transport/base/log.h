// Logging without torch: the plugin installs a sink that forwards to c10's logging; standalone users of
// the transport (its tests) get stderr.
#pragma once

#include <functional>
#include <string>

namespace hier::transport {

enum class LogLevel { Debug, Info, Warning, Error };

using LogSink = std::function<void(LogLevel, const std::string&)>;
void setLogSink(LogSink sink);

// True when HIER_DEBUG asks for messages of this level (warnings and errors always pass).
bool logEnabled(LogLevel level);
void log(LogLevel level, const std::string& message);

}  // namespace hier::transport
