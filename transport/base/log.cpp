#include "transport/base/log.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace hier::transport {
namespace {

std::mutex sinkMutex;
LogSink& sink() {
  static LogSink current = [](LogLevel level, const std::string& message) {
    static const char* names[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
    std::fprintf(stderr, "[hier %s] %s\n", names[int(level)], message.c_str());
  };
  return current;
}

// HIER_DEBUG: WARNING (the default), INFO or DEBUG; read once per process.
LogLevel threshold() {
  static const LogLevel level = [] {
    const char* value = std::getenv("HIER_DEBUG");
    std::string name(value != nullptr ? value : "WARNING");
    for (auto& c : name) c = char(std::toupper(static_cast<unsigned char>(c)));
    if (name == "INFO") return LogLevel::Info;
    if (name == "DEBUG") return LogLevel::Debug;
    if (name == "WARNING" || name == "WARN" || name.empty()) return LogLevel::Warning;
    throw std::invalid_argument("HIER_DEBUG must be WARNING, INFO or DEBUG, not '" + name + "'");
  }();
  return level;
}

}  // namespace

void setLogSink(LogSink newSink) {
  std::lock_guard<std::mutex> lock(sinkMutex);
  sink() = std::move(newSink);
}

bool logEnabled(LogLevel level) { return level >= LogLevel::Warning || int(level) >= int(threshold()); }

void log(LogLevel level, const std::string& message) {
  if (!logEnabled(level)) return;
  std::lock_guard<std::mutex> lock(sinkMutex);
  sink()(level, message);
}

}  // namespace hier::transport
