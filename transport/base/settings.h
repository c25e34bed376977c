// HIER_* environment settings the transport reads, once per process. Each is documented in the README
// with its default; the defaults come from the benchmark (python -m torch_hier.bench).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace hier::transport {

struct Settings {
  // HIER_SPIN_US: how long a waiting thread spins (drives UCX, or watches a peer's counter) before it
  // sleeps. Unset, the spin is learned (spin_budget.h) and `spin` is its least.
  std::chrono::microseconds spin{50};
  bool spinFixed = false;
  // Algorithm switch points, in bytes of the whole buffer (HIER_<NAME>_BYTES).
  size_t allreduceRingMinBytes = 64 * 1024;    // below: recursive doubling; from here: ring
  size_t reduceRingMinBytes = 256 * 1024;      // below: binomial tree; from here: reduce-scatter + gather
  size_t broadcastChainMinBytes = 256 * 1024;  // below: binomial tree; from here: pipelined chain
  size_t allgatherRingMinBytes = 256 * 1024;   // below: everyone to everyone at once; from here: ring
  size_t pipelineChunkBytes = 512 * 1024;      // fragment size of the pipelined algorithms
  // Ranks that share a host run collectives from this size on through shared memory (HIER_SHM_MIN_BYTES),
  // in chunks of HIER_SHM_SLOT_BYTES.
  size_t shmMinBytes = 16 * 1024;
  size_t shmSlotBytes = 512 * 1024;
  // HIER_HIERARCHY=0 keeps every collective flat (for comparisons); HIER_SPLIT_RAIL_MIN_BYTES: allreduces
  // from this size on take the split-rail schedule on layered groups, smaller ones the leaders'.
  bool hierarchy = true;
  size_t splitRailMinBytes = 64 * 1024;
  // HIER_HIERARCHY_FRAGMENT_BYTES: hierarchical schedules cut buffers into fragments of at most this
  // size, so the network step of one fragment overlaps the node steps of the next (pipeline.h).
  size_t hierarchyFragmentBytes = 1024 * 1024;
  // HIER_CARRY_BYTES: a collective whose ranks' contributions come to at most this together travels
  // inside the agreement (agreement.h); 0 turns that off. At most kMaxCarryBytes, which a board holds.
  // 64K against 32K: docs/measurements.md.
  size_t carryBytes = 64 * 1024;
  // HIER_EAGER_INIT=1: a group sets up at creation what its first collective would (Group::prepare).
  bool eagerInit = false;
  // How often the progress thread looks for requests past their deadline.
  std::chrono::milliseconds progressTick{100};
  // How long shutdown waits for UCX to close endpoints.
  std::chrono::milliseconds cancelGrace{1000};
};

const Settings& settings();

// Exposed for tests and diagnostics: parse a byte count such as "65536", "64K", "4M".
size_t parseBytes(const std::string& text, const char* name);

}  // namespace hier::transport
