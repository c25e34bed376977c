#include "transport/message_algorithms/split_sizes.h"

#include <algorithm>
#include <string>

#include "transport/base/error.h"

namespace hier::transport::algorithms {

// allgather_direct.cpp
void allgatherDirect(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs);

uint64_t checkSplitSizes(const std::vector<uint64_t>& sizes, int n, const std::vector<int>& names) {
  auto name = [&](int index) { return names.empty() ? index : names[size_t(index)]; };
  uint64_t largest = 0;
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      const uint64_t sent = sizes[2 * size_t(n) * size_t(s) + size_t(d)];
      const uint64_t expected = sizes[2 * size_t(n) * size_t(d) + size_t(n + s)];
      if (sent != expected) {
        throw Error(ErrorKind::InvalidUsage,
                    "the ranks' split sizes do not match: rank " + std::to_string(name(s)) + " sends " +
                        std::to_string(sent) + " bytes to rank " + std::to_string(name(d)) + ", which expects " +
                        std::to_string(expected) +
                        " bytes from it; give every rank input_split_sizes that match "
                        "the other ranks' output_split_sizes (nothing was sent, and the group stays usable)",
                    {name(s), name(d)});
      }
      largest = std::max(largest, sent);
    }
  }
  return largest;
}

std::vector<uint64_t> splitSizeTable(Collective& c, const std::vector<Buffer>& inputs,
                                     const std::vector<Buffer>& outputs, const std::vector<uint64_t>* known) {
  if (known != nullptr) return *known;
  const size_t n = size_t(c.size()), r = size_t(c.rank());
  std::vector<uint64_t> sizes(2 * n * n);
  std::vector<Buffer> rows;
  for (size_t s = 0; s < n; ++s) rows.push_back(Buffer{&sizes[2 * n * s], 2 * n, DataType::Int64, MemoryType::Host});
  for (size_t p = 0; p < n; ++p) {
    sizes[2 * n * r + p] = inputs[p].bytes();
    sizes[2 * n * r + n + p] = outputs[p].bytes();
  }
  allgatherDirect(c, rows[r], rows);
  std::vector<int> names;
  for (size_t s = 0; s < n; ++s) names.push_back(c.communicator().nameOf(int(s)));
  checkSplitSizes(sizes, int(n), names);
  return sizes;
}

uint64_t shareSplitSizes(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                         const std::vector<uint64_t>* known) {
  if (known != nullptr) return *std::max_element(known->begin(), known->end());
  const std::vector<uint64_t> sizes = splitSizeTable(c, inputs, outputs, nullptr);
  return *std::max_element(sizes.begin(), sizes.end());
}

}  // namespace hier::transport::algorithms
