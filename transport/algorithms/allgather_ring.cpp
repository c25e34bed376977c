// Ring allgather: at step s every rank passes the block it received at step s-1 (its own at step 0) to
// its right neighbour. n-1 steps, each rank sends and receives every other rank's block exactly once,
// straight into the output (UCX's rendezvous copies it once, zero-copy on our side).
#include <cstring>

#include "transport/algorithms/algorithms.h"

namespace hier::transport::algorithms {

void ringAllgather(Collective& c, const std::vector<Buffer>& blocks) {
  const int n = c.size(), r = c.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  auto block = [n](int b) { return size_t(((b % n) + n) % n); };
  for (int step = 0; step < n - 1; ++step) {
    std::vector<RequestPtr> requests{c.receive(left, blocks[block(r - step - 1)]),
                                     c.send(right, blocks[block(r - step)])};
    c.wait(requests);
  }
}

void allgatherRing(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  const Buffer& own = outputs[size_t(c.rank())];
  if (own.data != input.data) std::memcpy(own.data, input.data, input.bytes());
  ringAllgather(c, outputs);
}

}  // namespace hier::transport::algorithms
