// Broadcast with one copy: the root publishes where its buffer lies and posts; every other rank copies it
// straight into its own buffer with process_vm_readv (cross-memory attach). Each byte crosses between
// processes once, where the slots (broadcast.cpp) copy it twice, into the root's slot and out of it; and
// every reader copies at once, from the root's buffer, with no chunk handed over. But the root waits for
// every reader, where through the slots it goes on once its last chunk is in (docs/measurements.md).
// split_copy (broadcast_split_copy.cpp), where the root copies its share too, replaced it in the default
// rule; it runs when HIER_ALGORITHMS asks for it.

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"

namespace hier::transport::shm {

void broadcastSingleCopy(Collective& c, NodeArena& arena, const Buffer& data, int root) {
  const uint32_t done = uint32_t(arena.nextChunk() + 1);
  const Deadline& deadline = c.deadline();

  if (arena.rank() == root) {
    arena.publish(data.data, data.bytes());
    arena.post(NodeArena::Posted, done);
    arena.post(NodeArena::Released, done);
    // The caller may change its buffer once this returns: every peer must have read it by then.
    arena.waitAll(NodeArena::Released, done, deadline);
  } else {
    arena.waitOne(root, NodeArena::Posted, done, deadline);
    if (data.bytes() != 0) arena.readFrom(root, data.data, data.bytes());
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(1);
}

}  // namespace hier::transport::shm
