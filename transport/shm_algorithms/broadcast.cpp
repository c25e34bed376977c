// Broadcast through shared memory: the root copies each chunk into its slot, every other rank copies it
// out. Each rank reads or writes the buffer once; only the root's slots are used.
#include <algorithm>
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"

namespace hier::transport::shm {

void broadcast(Collective& c, NodeArena& arena, const Buffer& data, int root) {
  const int r = arena.rank();
  const size_t chunkBytes = arena.slotBytes();
  const uint64_t chunks = (data.bytes() + chunkBytes - 1) / chunkBytes;
  const Deadline& deadline = c.deadline();

  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;
    const uint32_t done = uint32_t(g + 1);
    const size_t first = k * chunkBytes, length = std::min(chunkBytes, data.bytes() - first);
    if (r == root) {
      if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
      std::memcpy(arena.slot(r, g), data.bytePtr() + first, length);
      arena.post(NodeArena::Posted, done);
    } else {
      arena.waitOne(root, NodeArena::Posted, done, deadline);
      std::memcpy(data.bytePtr() + first, arena.slot(root, g), length);
    }
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
