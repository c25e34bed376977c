// Gather through shared memory: per chunk, every rank but the root copies its part's chunk into its slot;
// the root copies each of them out into place. Every rank's part is as large as every other's (the
// caller's agreement guarantees it), so each rank counts the same chunks from its own input. The copying
// is split between the ranks: each byte is copied in by its sender and out by the root, at once, where a
// linear gather over UCX leaves the whole transfer to one copy engine.
#include <algorithm>
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"

namespace hier::transport::shm {

void gather(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs, int root) {
  const int n = arena.size(), r = arena.rank();
  const size_t chunkBytes = arena.slotBytes();
  const uint64_t chunks = (input.bytes() + chunkBytes - 1) / chunkBytes;
  const Deadline& deadline = c.deadline();

  if (r == root && outputs[size_t(r)].data != input.data && input.bytes() != 0) {
    std::memcpy(outputs[size_t(r)].data, input.data, input.bytes());
  }
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;
    const uint32_t done = uint32_t(g + 1);
    const size_t first = k * chunkBytes, length = std::min(chunkBytes, input.bytes() - first);
    if (r != root) {
      // The slot was last read two chunks ago, by whichever ranks that collective had read it.
      if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
      std::memcpy(arena.slot(r, g), input.bytePtr() + first, length);
      arena.post(NodeArena::Posted, done);
    } else {
      for (int p = 0; p < n; ++p) {
        if (p == root) continue;
        arena.waitOne(p, NodeArena::Posted, done, deadline);
        std::memcpy(outputs[size_t(p)].bytePtr() + first, arena.slot(p, g), length);
      }
    }
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
