// Allreduce through shared memory. Per chunk: every rank copies its chunk into its slot; rank r reduces
// part r of the chunk over all slots, in place in its own slot; every rank copies each part's result
// out of the slot of the rank that reduced it. The user's buffer is read once and written once; the
// slots stay in the cache. Each element is reduced by one rank only, so every rank gets the same bits.
#include <algorithm>
#include <cstring>

#include "transport/algorithms/algorithms.h"
#include "transport/reduce.h"
#include "transport/shm/collectives.h"

namespace hier::transport::shm {

void allreduce(Collective& c, NodeArena& arena, const Buffer& data, ReduceOp op) {
  const int n = arena.size(), r = arena.rank();
  const size_t elementBytes = elementSize(data.dtype);
  const size_t chunkElements = arena.slotBytes() / elementBytes;
  const uint64_t chunks = (data.count + chunkElements - 1) / chunkElements;
  const NodeArena::Deadline deadline{c.deadline(), c.timeout()};

  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;  // numbered across operations: picks the slot
    const uint32_t done = uint32_t(g + 1);      // what the counters say once this chunk's step is done
    const Buffer chunk = data.slice(k * chunkElements, std::min(chunkElements, data.count - k * chunkElements));
    const auto parts = algorithms::evenRanges(chunk.count, n);

    // The slot last held chunk g-2: every rank must be done reading it.
    if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
    std::memcpy(arena.slot(r, g), chunk.data, chunk.bytes());
    arena.post(NodeArena::Posted, done);

    arena.waitAll(NodeArena::Posted, done, deadline);
    const size_t offset = parts[size_t(r)].offset * elementBytes, count = parts[size_t(r)].count;
    char* mine = arena.slot(r, g) + offset;
    for (int p = 0; p < n; ++p) {
      if (p != r) reduce(mine, mine, arena.slot(p, g) + offset, count, data.dtype, op);
    }
    if (op == ReduceOp::Avg) finishAverage(mine, count, data.dtype, n);
    arena.post(NodeArena::Reduced, done);

    arena.waitAll(NodeArena::Reduced, done, deadline);
    for (int p = 0; p < n; ++p) {
      const size_t at = parts[size_t(p)].offset * elementBytes;
      std::memcpy(chunk.bytePtr() + at, arena.slot(p, g) + at, parts[size_t(p)].count * elementBytes);
    }
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
