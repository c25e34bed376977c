// Ring reduce_scatter: the ring reduction (ring_steps.h) with the inputs left untouched.
// Partial sums of passing blocks alternate between two scratch areas (a block's partial sum is sent on
// the step after it is made, while the next one is made in the other area).
#include <algorithm>
#include <cstring>

#include "transport/message_algorithms/ring_steps.h"
#include "transport/reduce/reduce.h"

namespace hier::transport::algorithms {

void reduceScatterRing(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op,
                       size_t chunkBytes) {
  const int n = c.size(), r = c.rank();
  const size_t elementBytes = elementSize(output.dtype);
  if (n == 1) {
    if (output.data != inputs[0].data) std::memcpy(output.data, inputs[0].data, output.bytes());
    return;
  }
  size_t largest = 0;
  for (auto& input : inputs) largest = std::max(largest, input.count);
  const size_t chunkElements = std::max<size_t>(1, chunkBytes / elementBytes);
  char* area = c.scratch(2 * chunkElements * elementBytes + 2 * largest * elementBytes + 64);
  char* partials[2] = {area + 2 * chunkElements * elementBytes,
                       area + 2 * chunkElements * elementBytes + largest * elementBytes};

  // Block b is received at step (r - 2 - b) mod n; its partial sum goes to the area of that step's parity.
  std::vector<Buffer> work(inputs.size());
  for (int b = 0; b < n; ++b) {
    int step = ((r - 2 - b) % n + n) % n;
    work[size_t(b)] = Buffer{partials[step % 2], inputs[size_t(b)].count, output.dtype, MemoryType::Host};
  }
  ringReduceScatter(c, inputs, work, output, op, chunkElements, area);
  if (op == ReduceOp::Avg) finishAverage(output.data, output.count, output.dtype, n);
}

}  // namespace hier::transport::algorithms
