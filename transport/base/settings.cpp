#include "transport/base/settings.h"

#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace hier::transport {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

void readBytes(const char* name, size_t& field) {
  if (const char* value = env(name)) field = parseBytes(value, name);
}

Settings read() {
  Settings s;
  if (const char* value = env("HIER_SPIN_US")) {
    s.spin = std::chrono::microseconds(std::stoll(value));
    s.spinFixed = true;
  }
  readBytes("HIER_ALLREDUCE_RING_MIN_BYTES", s.allreduceRingMinBytes);
  readBytes("HIER_REDUCE_RING_MIN_BYTES", s.reduceRingMinBytes);
  readBytes("HIER_BROADCAST_CHAIN_MIN_BYTES", s.broadcastChainMinBytes);
  readBytes("HIER_ALLGATHER_RING_MIN_BYTES", s.allgatherRingMinBytes);
  readBytes("HIER_PIPELINE_CHUNK_BYTES", s.pipelineChunkBytes);
  readBytes("HIER_SHM_MIN_BYTES", s.shmMinBytes);
  readBytes("HIER_SPLIT_RAIL_MIN_BYTES", s.splitRailMinBytes);
  readBytes("HIER_HIERARCHY_FRAGMENT_BYTES", s.hierarchyFragmentBytes);
  if (const char* value = env("HIER_HIERARCHY")) s.hierarchy = std::string(value) != "0";
  if (const char* value = env("HIER_EAGER_INIT")) s.eagerInit = std::string(value) == "1";
  readBytes("HIER_SHM_SLOT_BYTES", s.shmSlotBytes);
  readBytes("HIER_CARRY_BYTES", s.carryBytes);
  if (s.carryBytes > 64 * 1024) throw std::invalid_argument("HIER_CARRY_BYTES must be at most 64K");
  if (s.shmSlotBytes < 4096) throw std::invalid_argument("HIER_SHM_SLOT_BYTES must be at least 4K");
  if (s.hierarchyFragmentBytes < 4096) throw std::invalid_argument("HIER_HIERARCHY_FRAGMENT_BYTES must be at least 4K");
  if (s.pipelineChunkBytes < 4096) throw std::invalid_argument("HIER_PIPELINE_CHUNK_BYTES must be at least 4K");
  return s;
}

}  // namespace

size_t parseBytes(const std::string& text, const char* name) {
  size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string(name) + " must be a byte count such as 65536, 64K or 4M, not '" + text +
                                "'");
  }
  std::string suffix = text.substr(used);
  if (suffix == "K" || suffix == "k" || suffix == "KiB")
    value <<= 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB")
    value <<= 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB")
    value <<= 30;
  else if (!suffix.empty()) {
    throw std::invalid_argument(std::string(name) + " must be a byte count such as 65536, 64K or 4M, not '" + text +
                                "'");
  }
  return size_t(value);
}

const Settings& settings() {
  static const Settings current = read();
  return current;
}

}  // namespace hier::transport
