// Allreduce through shared memory. Per chunk: every rank copies into its slot the parts of the chunk
// the other ranks reduce; rank r reduces part r over its own chunk and every other slot, into its own
// slot; every rank copies each part's result out of the slot of the rank that reduced it. The user's
// buffer is read once and written once; the slots stay in the cache. Each element is reduced by one rank
// only, so every rank gets the same bits.
#include <algorithm>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"
#include "transport/reduce/reduce.h"
#include "transport/shm_algorithms/slot_reduction.h"

namespace hier::transport::shm {

void allreduce(Collective& c, NodeArena& arena, const Buffer& data, ReduceOp op) {
  const size_t chunkElements = reduceChunkElements(arena, data.dtype);
  const uint64_t chunks = (data.count + chunkElements - 1) / chunkElements;
  const Deadline& deadline = c.deadline();

  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;  // numbered across operations: picks the slot
    const Buffer chunk = data.slice(k * chunkElements, std::min(chunkElements, data.count - k * chunkElements));
    const auto parts = evenRanges(chunk.count, arena.size());
    reducePartsInSlots(arena, g, chunk, parts, op, deadline);
    copyReducedParts(arena, g, chunk, parts, deadline);
    arena.post(NodeArena::Released, uint32_t(g + 1));
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
