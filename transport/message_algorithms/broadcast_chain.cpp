// Pipelined chain broadcast: ranks form a chain from the root; the buffer moves in fragments and each
// rank forwards a fragment as soon as it has it. Every rank receives the buffer once and sends it once,
// so for large buffers the time approaches one buffer transfer, whatever n is.
#include <algorithm>

#include "transport/group/collective.h"

namespace hier::transport::algorithms {

void broadcastChain(Collective& c, const Buffer& data, int root, size_t chunkBytes) {
  const int n = c.size(), r = c.rank();
  const int relative = (r - root + n) % n;
  const int previous = (r + n - 1) % n, next = (r + 1) % n;
  const bool last = relative == n - 1;
  const size_t chunkElements = std::max<size_t>(1, chunkBytes / elementSize(data.dtype));
  const size_t fragments = (data.count + chunkElements - 1) / chunkElements;
  auto fragment = [&](size_t k) {
    return data.slice(k * chunkElements, std::min(chunkElements, data.count - k * chunkElements));
  };

  std::vector<RequestPtr> sends;
  if (relative == 0) {
    for (size_t k = 0; k < fragments; ++k) sends.push_back(c.send(next, fragment(k)));
    c.wait(sends);
    return;
  }
  // Post every receive up front, straight into place, then forward each fragment as it lands.
  std::vector<RequestPtr> receives;
  for (size_t k = 0; k < fragments; ++k) receives.push_back(c.receive(previous, fragment(k)));
  for (size_t k = 0; k < fragments; ++k) {
    c.wait(receives[k]);
    if (!last) sends.push_back(c.send(next, fragment(k)));
  }
  c.wait(sends);
}

}  // namespace hier::transport::algorithms
