// Direct allgather: every rank sends its part to every other rank at once. One round of latency, n-1
// messages per rank: the choice for small parts.
#include <cstring>

#include "transport/group/collective.h"

namespace hier::transport::algorithms {

void allgatherDirect(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  const int n = c.size(), r = c.rank();
  std::vector<RequestPtr> requests;
  requests.reserve(2 * size_t(n));
  // Start with the neighbours after this rank so that not everyone sends to rank 0 first.
  for (int k = 1; k < n; ++k) requests.push_back(c.receive((r + n - k) % n, outputs[size_t((r + n - k) % n)]));
  for (int k = 1; k < n; ++k) requests.push_back(c.send((r + k) % n, input));
  const Buffer& own = outputs[size_t(r)];
  if (own.data != input.data) std::memcpy(own.data, input.data, input.bytes());
  c.wait(requests);
}

}  // namespace hier::transport::algorithms
