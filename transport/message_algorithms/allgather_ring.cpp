// Ring allgather: at step s every rank passes the block it received at step s-1 (its own at step 0) to
// its right neighbour. n-1 steps, each rank sends and receives every other rank's block exactly once,
// straight into the output (UCX's rendezvous copies it once, zero-copy on our side).
#include <cstring>

#include "transport/message_algorithms/ring_steps.h"

namespace hier::transport::algorithms {

void allgatherRing(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  const Buffer& own = outputs[size_t(c.rank())];
  if (own.data != input.data) std::memcpy(own.data, input.data, input.bytes());
  ringAllgather(c, outputs);
}

}  // namespace hier::transport::algorithms
