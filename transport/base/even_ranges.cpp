#include "transport/base/even_ranges.h"

namespace hier::transport {

std::vector<Range> evenRanges(size_t count, int parts) {
  std::vector<Range> ranges;
  ranges.reserve(size_t(parts));
  const size_t base = count / size_t(parts), extra = count % size_t(parts);
  size_t offset = 0;
  for (int p = 0; p < parts; ++p) {
    size_t n = base + (size_t(p) < extra ? 1 : 0);
    ranges.push_back({offset, n});
    offset += n;
  }
  return ranges;
}

std::vector<Buffer> splitEvenly(const Buffer& data, int parts) {
  std::vector<Buffer> blocks;
  for (const Range& range : evenRanges(data.count, parts)) blocks.push_back(data.slice(range.offset, range.count));
  return blocks;
}

}  // namespace hier::transport
