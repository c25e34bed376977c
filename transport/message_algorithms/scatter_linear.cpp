// Scatter: the root sends each rank its part; each part is sent once, straight from the root's buffer.
#include <cstring>

#include "transport/group/collective.h"

namespace hier::transport::algorithms {

void scatterLinear(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, int root) {
  const int n = c.size(), r = c.rank();
  if (r != root) {
    c.wait(c.receive(root, output));
    return;
  }
  std::vector<RequestPtr> requests;
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    requests.push_back(c.send(p, inputs[size_t(p)]));
  }
  if (output.data != inputs[size_t(r)].data) std::memcpy(output.data, inputs[size_t(r)].data, output.bytes());
  c.wait(requests);
}

}  // namespace hier::transport::algorithms
