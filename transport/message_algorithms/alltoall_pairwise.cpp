// All-to-all: at step k every rank sends to rank + k and receives from rank - k, so each step pairs the
// ranks up instead of everyone hitting the same peer. All steps are posted at once and UCX overlaps them.
// The ranks first share their split sizes (shareSplitSizes, unless the caller knows them), so that a
// pair whose sizes disagree makes every rank refuse the call, not only that pair's receiver. Empty parts
// are exchanged too, as zero-byte messages, so that every part is a message.
#include <cstring>

#include "transport/message_algorithms/split_sizes.h"

namespace hier::transport::algorithms {

void alltoallPairwise(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                      const std::vector<uint64_t>* known) {
  shareSplitSizes(c, inputs, outputs, known);
  const int n = c.size(), r = c.rank();
  std::vector<RequestPtr> requests;
  requests.reserve(2 * size_t(n));
  for (int k = 1; k < n; ++k) {
    int from = (r + n - k) % n, to = (r + k) % n;
    requests.push_back(c.receive(from, outputs[size_t(from)]));
    requests.push_back(c.send(to, inputs[size_t(to)]));
  }
  const Buffer& in = inputs[size_t(r)];
  const Buffer& out = outputs[size_t(r)];
  if (out.data != in.data && in.bytes() != 0) std::memmove(out.data, in.data, in.bytes());
  c.wait(requests);
}

}  // namespace hier::transport::algorithms
