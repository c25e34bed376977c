#include "transport/log.h"

#include <cstdio>
#include <mutex>

#include "transport/settings.h"

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

}  // namespace

void setLogSink(LogSink newSink) {
  std::lock_guard<std::mutex> lock(sinkMutex);
  sink() = std::move(newSink);
}

bool logEnabled(LogLevel level) {
  return level >= LogLevel::Warning || int(level) >= int(settings().debugLevel);
}

void log(LogLevel level, const std::string& message) {
  if (!logEnabled(level)) return;
  std::lock_guard<std::mutex> lock(sinkMutex);
  sink()(level, message);
}

}  // namespace hier::transport
