// Binomial-tree broadcast: the root's data doubles its reach every round. log2(n) rounds; the latency
// algorithm, but the root sends the whole buffer log2(n) times.
#include "transport/group/collective.h"

namespace hier::transport::algorithms {

void broadcastBinomial(Collective& c, const Buffer& data, int root) {
  const int n = c.size(), r = c.rank();
  const int relative = (r - root + n) % n;
  int mask = 1;
  while (mask < n) {
    if (relative & mask) {
      c.wait(c.receive((r - mask + n) % n, data));
      break;
    }
    mask <<= 1;
  }
  std::vector<RequestPtr> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (relative + mask < n) sends.push_back(c.send((r + mask) % n, data));
  }
  c.wait(sends);
}

}  // namespace hier::transport::algorithms
