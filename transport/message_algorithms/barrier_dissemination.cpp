// Dissemination barrier: in round k every rank signals rank + 2^k and waits for rank - 2^k. After
// ceil(log2 n) rounds every rank has heard, directly or not, from every other.
#include "transport/group/collective.h"

namespace hier::transport::algorithms {

void barrierDissemination(Collective& c) {
  const int n = c.size(), r = c.rank();
  // The tokens live in scratch, not on the stack: after a timeout UCX may still write the one received.
  char* tokens = n > 1 ? c.scratch(2) : nullptr;
  for (int distance = 1; distance < n; distance <<= 1) {
    std::vector<RequestPtr> requests{c.receive((r + n - distance) % n, tokens, 1),
                                     c.send((r + distance) % n, tokens + 1, 1)};
    c.wait(requests);
  }
}

}  // namespace hier::transport::algorithms
