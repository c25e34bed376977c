// Reduce for large buffers: a ring reduce-scatter leaves block b fully reduced on rank b, then every
// rank sends its block to the root. Each rank moves about 2/n of the buffer instead of the whole buffer
// per tree level, and the reduction work is spread over all ranks.
#include <algorithm>
#include <cstring>

#include "transport/base/even_ranges.h"
#include "transport/message_algorithms/ring_steps.h"
#include "transport/reduce/reduce.h"

namespace hier::transport::algorithms {

void reduceRing(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root, size_t chunkBytes) {
  const int n = c.size(), r = c.rank();
  const size_t elementBytes = elementSize(input.dtype);
  const auto blocks = splitEvenly(input, n);
  const size_t largest = blocks[0].count;  // splitEvenly puts the larger blocks first
  const size_t chunkElements = std::max<size_t>(1, chunkBytes / elementBytes);
  char* area = c.scratch(2 * chunkElements * elementBytes + 3 * largest * elementBytes);
  char* partials[2] = {area + 2 * chunkElements * elementBytes,
                       area + 2 * chunkElements * elementBytes + largest * elementBytes};

  std::vector<Buffer> work(blocks.size());
  for (int b = 0; b < n; ++b) {
    int step = ((r - 2 - b) % n + n) % n;
    work[size_t(b)] = Buffer{partials[step % 2], blocks[size_t(b)].count, input.dtype, MemoryType::Host};
  }
  // The root's block lands in its output; the others' in scratch, from where they go to the root.
  const auto outputBlocks = r == root ? splitEvenly(output, n) : std::vector<Buffer>{};
  Buffer mine = r == root ? outputBlocks[size_t(r)]
                          : Buffer{area + 2 * chunkElements * elementBytes + 2 * largest * elementBytes,
                                   blocks[size_t(r)].count, input.dtype, MemoryType::Host};
  ringReduceScatter(c, blocks, work, mine, op, chunkElements, area);
  if (op == ReduceOp::Avg) finishAverage(mine.data, mine.count, mine.dtype, n);

  if (r != root) {
    c.wait(c.send(root, mine));
    return;
  }
  std::vector<RequestPtr> requests;
  for (int p = 0; p < n; ++p) {
    if (p != root) requests.push_back(c.receive(p, outputBlocks[size_t(p)]));
  }
  c.wait(requests);
}

}  // namespace hier::transport::algorithms
