// Gather: the root receives every rank's part straight into place.
#include <cstring>

#include "transport/group/collective.h"

namespace hier::transport::algorithms {

void gatherLinear(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs, int root) {
  const int n = c.size(), r = c.rank();
  if (r != root) {
    c.wait(c.send(root, input));
    return;
  }
  std::vector<RequestPtr> requests;
  for (int p = 0; p < n; ++p) {
    if (p != root) requests.push_back(c.receive(p, outputs[size_t(p)]));
  }
  if (outputs[size_t(r)].data != input.data) std::memcpy(outputs[size_t(r)].data, input.data, input.bytes());
  c.wait(requests);
}

}  // namespace hier::transport::algorithms
