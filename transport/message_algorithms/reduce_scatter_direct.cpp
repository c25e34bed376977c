// Direct reduce_scatter: every rank sends each other rank its part at once, then reduces the parts it
// received for its own, in rank order. One round of latency and n-1 messages a rank where the ring takes
// n-1 rounds: for small parts. The parts land in scratch, this rank's own among them, so that an output
// that aliases the input is read before it is written.
#include <algorithm>
#include <cstring>
#include <vector>

#include "transport/group/collective.h"
#include "transport/reduce/reduce.h"

namespace hier::transport::algorithms {

void reduceScatterDirect(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = output.bytes();
  char* parts = c.scratch(std::max<size_t>(size_t(n) * bytes, 1));  // rank p's part at p * bytes
  auto part = [&](int p) { return parts + size_t(p) * bytes; };
  std::vector<RequestPtr> requests;
  requests.reserve(2 * size_t(n));
  // Start with the neighbours after this rank so that not everyone sends to rank 0 first.
  for (int k = 1; k < n; ++k) requests.push_back(c.receive((r + n - k) % n, part((r + n - k) % n), bytes));
  for (int k = 1; k < n; ++k) requests.push_back(c.send((r + k) % n, inputs[size_t((r + k) % n)]));
  std::memcpy(part(r), inputs[size_t(r)].data, bytes);
  c.wait(requests);
  if (n == 1) {
    std::memcpy(output.data, part(0), bytes);
    return;
  }
  reduce(output.data, part(0), part(1), output.count, output.dtype, op);
  for (int p = 2; p < n; ++p) reduce(output.data, output.data, part(p), output.count, output.dtype, op);
  if (op == ReduceOp::Avg) finishAverage(output.data, output.count, output.dtype, n);
}

}  // namespace hier::transport::algorithms
