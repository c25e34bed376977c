// Binomial-tree reduce: in round k, ranks whose (root-relative) number has bit k set send their partial
// result to the rank 2^k below and drop out. log2(n) rounds; the latency algorithm. Inputs are never
// modified: a rank that combines children works on a scratch copy (the root works in its output).
#include <cstring>

#include "transport/group/collective.h"
#include "transport/reduce/reduce.h"

namespace hier::transport::algorithms {

void reduceBinomial(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  const int n = c.size(), r = c.rank();
  const int relative = (r - root + n) % n;
  const size_t bytes = input.bytes();
  auto absolute = [&](int rel) { return (rel + root) % n; };

  // Children report in the rounds below this rank's lowest set bit; the first of them is relative + 1.
  const int lowestBit = relative == 0 ? n : (relative & -relative);
  const bool hasChildren = lowestBit > 1 && relative + 1 < n;
  char* area = hasChildren ? c.scratch(2 * bytes) : nullptr;
  char* incoming = area;
  void* accumulator = input.data;
  if (relative == 0) {
    if (output.data != input.data) std::memcpy(output.data, input.data, bytes);
    accumulator = output.data;
  } else if (hasChildren) {
    accumulator = area + bytes;
    if (bytes != 0) std::memcpy(accumulator, input.data, bytes);  // an empty input's data may be null
  }

  for (int mask = 1; mask < n; mask <<= 1) {
    if (relative & mask) {
      c.wait(c.send(absolute(relative - mask), accumulator, bytes));
      break;
    }
    if (relative + mask < n) {
      c.wait(c.receive(absolute(relative + mask), incoming, bytes));
      reduce(accumulator, accumulator, incoming, input.count, input.dtype, op);
    }
  }
  if (relative == 0 && op == ReduceOp::Avg) finishAverage(output.data, output.count, output.dtype, n);
}

}  // namespace hier::transport::algorithms
