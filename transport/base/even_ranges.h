// A count of elements cut into parts whose sizes differ by at most one, the larger first: how the ring
// algorithms cut a buffer into blocks, the arena's reductions a chunk into parts, and the schedules a
// buffer into fragments.
#pragma once

#include <cstddef>
#include <vector>

#include "transport/base/types.h"

namespace hier::transport {

struct Range {
  size_t offset;
  size_t count;
};
std::vector<Range> evenRanges(size_t count, int parts);
// `data` cut into the blocks of evenRanges().
std::vector<Buffer> splitEvenly(const Buffer& data, int parts);

}  // namespace hier::transport
