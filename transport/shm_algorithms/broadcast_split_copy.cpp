// Broadcast with one copy, split between the root and each reader: every rank publishes where its buffer
// lies; the root writes the first 1/n of each reader's buffer (process_vm_writev) while that reader reads
// the rest from the root's buffer (process_vm_readv). With single_copy (broadcast_single_copy.cpp) the
// readers do all the copying and the root only waits for them; here the root copies (n-1)/n of the
// buffer in all, as each reader does, so with a core for every rank the copy takes about (n-1)/n of the
// time one reader needs for the whole buffer, half at 2 ranks.

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"

namespace hier::transport::shm {

void broadcastSplitCopy(Collective& c, NodeArena& arena, const Buffer& data, int root) {
  const int n = arena.size();
  const uint32_t done = uint32_t(arena.nextChunk() + 1);
  const Deadline& deadline = c.deadline();
  const size_t bytes = data.bytes();
  // The root's part of each reader's buffer, in whole pages, which the kernel pins one by one.
  constexpr size_t kPage = 4096;
  const size_t rootPart = bytes / size_t(n) / kPage * kPage;

  arena.publish(data.data, bytes);
  arena.post(NodeArena::Posted, done);
  if (arena.rank() == root) {
    for (int k = 1; k < n; ++k) {
      const int reader = (root + k) % n;
      arena.waitOne(reader, NodeArena::Posted, done, deadline);
      if (rootPart != 0) arena.writeInto(reader, 0, data.data, rootPart, bytes);
    }
    arena.post(NodeArena::Released, done);
    // The caller may change its buffer once this returns: every reader must have read its part by then.
    arena.waitAll(NodeArena::Released, done, deadline);
  } else {
    arena.waitOne(root, NodeArena::Posted, done, deadline);
    if (bytes > rootPart) arena.readPartFrom(root, rootPart, data.bytePtr() + rootPart, bytes - rootPart, bytes);
    arena.post(NodeArena::Released, done);
    // The root writes into this buffer until it posts: the caller may not look at it before.
    arena.waitOne(root, NodeArena::Released, done, deadline);
  }
  arena.consumeChunks(1);
}

}  // namespace hier::transport::shm
