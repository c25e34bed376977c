// The two halves of the ring algorithms, each a step that several of them take.
//
// ringReduceScatter (allreduce, reduce, reduce_scatter): block b ends on rank b. It starts on rank
// b+1, which sends its own input[b] right; every rank it passes adds its input[b]; after n-1 steps rank
// b adds the last contribution. At step s this rank sends block r-1-s and receives block r-2-s. Each
// block moves in fragments of `chunkElements`; two fragments are received at a time into
// `receiveArea`, so each is reduced while the next arrives and still in cache.
//
// ringAllgather (allreduce, allgather): at step s every rank passes the block it received at step s-1
// (its own at step 0) to its right neighbour.
#include <algorithm>

#include "transport/message_algorithms/ring_steps.h"
#include "transport/reduce/reduce.h"

namespace hier::transport::algorithms {

void ringReduceScatter(Collective& c, const std::vector<Buffer>& input, const std::vector<Buffer>& work,
                       const Buffer& result, ReduceOp op, size_t chunkElements, char* receiveArea) {
  const int n = c.size(), r = c.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  auto block = [n](int b) { return ((b % n) + n) % n; };
  const size_t elementBytes = elementSize(result.dtype);

  for (int step = 0; step < n - 1; ++step) {
    const int outgoing = block(r - 1 - step), incoming = block(r - 2 - step);
    const Buffer& source = step == 0 ? input[size_t(outgoing)] : work[size_t(outgoing)];
    const Buffer& mine = input[size_t(incoming)];
    const Buffer& target = step == n - 2 ? result : work[size_t(incoming)];

    std::vector<RequestPtr> sends;
    for (size_t offset = 0; offset < source.count; offset += chunkElements) {
      sends.push_back(c.send(right, source.slice(offset, std::min(chunkElements, source.count - offset))));
    }

    const size_t fragments = (mine.count + chunkElements - 1) / chunkElements;
    RequestPtr receives[2];
    auto slot = [&](size_t k) { return receiveArea + (k % 2) * chunkElements * elementBytes; };
    auto length = [&](size_t k) { return std::min(chunkElements, mine.count - k * chunkElements); };
    auto post = [&](size_t k) { receives[k % 2] = c.receive(left, slot(k), length(k) * elementBytes); };
    for (size_t k = 0; k < std::min<size_t>(2, fragments); ++k) post(k);
    for (size_t k = 0; k < fragments; ++k) {
      c.wait(receives[k % 2]);
      const size_t offset = k * chunkElements;
      reduce(target.at(offset), mine.at(offset), slot(k), length(k), result.dtype, op);
      if (k + 2 < fragments) post(k + 2);
    }
    // The next step overwrites the area this step's sends read from.
    c.wait(sends);
  }
}

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

}  // namespace hier::transport::algorithms
