// Reduce to a root through shared memory: allreduce's first two steps (copy in, each rank reduces its
// part of the chunk in its slot), then only the root copies the parts out. A rank is done with a
// chunk (and says so, freeing its slot for reuse) once it has read all it needs of the others' slots.
#include <algorithm>
#include <cstring>

#include "transport/algorithms/algorithms.h"
#include "transport/reduce.h"
#include "transport/shm/collectives.h"

namespace hier::transport::shm {

void reduce(Collective& c, NodeArena& arena, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  const int n = arena.size(), r = arena.rank();
  const size_t elementBytes = elementSize(input.dtype);
  const size_t chunkElements = arena.slotBytes() / elementBytes;
  const uint64_t chunks = (input.count + chunkElements - 1) / chunkElements;
  const NodeArena::Deadline deadline{c.deadline(), c.timeout()};

  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;
    const uint32_t done = uint32_t(g + 1);
    const size_t first = k * chunkElements, length = std::min(chunkElements, input.count - first);
    const auto parts = algorithms::evenRanges(length, n);

    if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
    std::memcpy(arena.slot(r, g), input.slice(first, length).data, length * elementBytes);
    arena.post(NodeArena::Posted, done);

    arena.waitAll(NodeArena::Posted, done, deadline);
    const size_t offset = parts[size_t(r)].offset * elementBytes, count = parts[size_t(r)].count;
    char* mine = arena.slot(r, g) + offset;
    for (int p = 0; p < n; ++p) {
      if (p != r) reduce(mine, mine, arena.slot(p, g) + offset, count, input.dtype, op);
    }
    if (op == ReduceOp::Avg) finishAverage(mine, count, input.dtype, n);
    arena.post(NodeArena::Reduced, done);

    if (r == root) {
      arena.waitAll(NodeArena::Reduced, done, deadline);
      char* out = output.slice(first, length).bytePtr();
      for (int p = 0; p < n; ++p) {
        const size_t at = parts[size_t(p)].offset * elementBytes;
        std::memcpy(out + at, arena.slot(p, g) + at, parts[size_t(p)].count * elementBytes);
      }
    }
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
