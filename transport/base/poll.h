// A bounded wait for something only polling can see (a CUDA event's end, from a thread that must be able
// to give up): it looks, sleeps a little longer each time (20 us growing to 1 ms, so a short wait costs
// little and a long one no core), and gives up at the deadline or when told to stop.
#pragma once

#include <functional>
#include <string>

#include "transport/base/deadline.h"

namespace hier::transport {

// Returns once `ready()` is true. Throws Error(Timeout) naming `what` when `deadline` passes first, and
// Error(Aborted) when `stop()` is true first (the group was aborted or is closing).
void pollUntil(const std::function<bool()>& ready, const Deadline& deadline, const std::function<bool()>& stop,
               const std::string& what);

}  // namespace hier::transport
