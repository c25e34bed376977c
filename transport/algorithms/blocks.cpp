#include "transport/algorithms/algorithms.h"

namespace hier::transport::algorithms {

std::vector<Buffer> splitEvenly(const Buffer& data, int parts) {
  std::vector<Buffer> blocks;
  blocks.reserve(size_t(parts));
  const size_t base = data.count / size_t(parts), extra = data.count % size_t(parts);
  size_t offset = 0;
  for (int p = 0; p < parts; ++p) {
    size_t count = base + (size_t(p) < extra ? 1 : 0);
    blocks.push_back(data.slice(offset, count));
    offset += count;
  }
  return blocks;
}

}  // namespace hier::transport::algorithms
