// Recursive doubling: log2(n) rounds in which partners swap their whole buffers and reduce. The latency
// algorithm: fewest rounds, every round moves the full buffer.
//
// With n not a power of two, the first 2*(n - p) ranks (p the largest power of two <= n) pair up first:
// the even one hands its data to the odd one and sits the rounds out, then gets the result back.
// Partners reduce in opposite orders (a op b and b op a); every op here is commutative element by
// element, so all ranks end with the same bits.
#include <cstring>

#include "transport/group/collective.h"
#include "transport/reduce/reduce.h"

namespace hier::transport::algorithms {

void allreduceRecursiveDoubling(Collective& c, const Buffer& data, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = data.bytes();
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int folded = n - p;
  char* incoming = c.scratch(bytes);

  // Fold the ranks beyond the power of two into their odd neighbours.
  int virtualRank = -1;
  if (r < 2 * folded) {
    if (r % 2 == 0) {
      c.wait(c.send(r + 1, data));
    } else {
      c.wait(c.receive(r - 1, incoming, bytes));
      reduce(data.data, data.data, incoming, data.count, data.dtype, op);
      virtualRank = r / 2;
    }
  } else {
    virtualRank = r - folded;
  }

  if (virtualRank >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      int partner = virtualRank ^ mask;
      int peer = partner < folded ? partner * 2 + 1 : partner + folded;
      std::vector<RequestPtr> requests{c.receive(peer, incoming, bytes), c.send(peer, data)};
      c.wait(requests);
      reduce(data.data, data.data, incoming, data.count, data.dtype, op);
    }
  }

  // Unfold: the odd partner returns the result.
  if (r < 2 * folded) {
    if (r % 2 == 1) {
      c.wait(c.send(r - 1, data));
    } else {
      c.wait(c.receive(r + 1, data));
    }
  }
  if (op == ReduceOp::Avg) finishAverage(data.data, data.count, data.dtype, n);
}

}  // namespace hier::transport::algorithms
