// Broadcast with one copy: the root publishes where its buffer lies and posts; every other rank copies it
// straight into its own buffer with process_vm_readv (cross-memory attach). Each byte crosses between
// processes once, where the slots (broadcast.cpp) copy it twice, into the root's slot and out of it; and
// every reader copies at once, from the root's buffer, with no chunk handed over. Which way is faster
// depends on the machine, as for allgather_single_copy.cpp: HIER_ALGORITHMS asks for it. On a 2-vCPU VM
// where data passes slowly between cores it took 0.6-0.8 of the slots' time at 64 KiB-1 MiB.
#include "transport/shm/collectives.h"

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
