// The key-value rendezvous every communicator is built on. The plugin backs it with the c10d Store of
// the process group; the transport tests back it with files in a shared directory.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace hier::transport {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Returns the value of `key`, waiting for another rank to set it. Throws Error(Timeout) when `timeout`
  // passes first.
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (0 when absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True when every key exists, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
};

}  // namespace hier::transport
