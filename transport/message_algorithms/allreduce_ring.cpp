// Ring allreduce: a ring reduce-scatter leaves block r fully reduced on rank r, a ring allgather
// circulates the blocks. Each rank sends and receives 2(n-1)/n of the buffer, the minimum for any
// allreduce, so this is the bandwidth algorithm. Works in place; only two fragments of scratch.
#include <algorithm>

#include "transport/base/even_ranges.h"
#include "transport/message_algorithms/ring_steps.h"
#include "transport/reduce/reduce.h"

namespace hier::transport::algorithms {

void allreduceRing(Collective& c, const Buffer& data, ReduceOp op, size_t chunkBytes) {
  const int n = c.size(), r = c.rank();
  const size_t chunkElements = std::max<size_t>(1, chunkBytes / elementSize(data.dtype));
  const auto blocks = splitEvenly(data, n);
  char* receiveArea = c.scratch(2 * chunkElements * elementSize(data.dtype));

  ringReduceScatter(c, blocks, blocks, blocks[size_t(r)], op, chunkElements, receiveArea);
  // Dividing the one block this rank owns before it circulates costs 1/n of dividing everything after.
  if (op == ReduceOp::Avg) finishAverage(blocks[size_t(r)].data, blocks[size_t(r)].count, data.dtype, n);
  ringAllgather(c, blocks);
}

}  // namespace hier::transport::algorithms
