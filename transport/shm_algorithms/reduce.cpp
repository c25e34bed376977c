// Reduce to a root through shared memory: allreduce's first two steps (copy in, each rank reduces its
// part of the chunk in its slot), then only the root copies the parts out. A rank is done with a
// chunk (and says so, freeing its slot for reuse) once it has read all it needs of the others' slots.
#include <algorithm>
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"
#include "transport/reduce/reduce.h"
#include "transport/shm_algorithms/slot_reduction.h"

namespace hier::transport::shm {

void reduce(Collective& c, NodeArena& arena, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  const size_t chunkElements = reduceChunkElements(arena, input.dtype);
  const uint64_t chunks = (input.count + chunkElements - 1) / chunkElements;
  const Deadline& deadline = c.deadline();

  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;
    const size_t first = k * chunkElements, length = std::min(chunkElements, input.count - first);
    const auto parts = evenRanges(length, arena.size());
    reducePartsInSlots(arena, g, input.slice(first, length), parts, op, deadline);
    if (arena.rank() == root) copyReducedParts(arena, g, output.slice(first, length), parts, deadline);
    arena.post(NodeArena::Released, uint32_t(g + 1));
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
