// Allgather with one copy: every rank publishes where its part lies and posts; every other rank copies
// the part straight from there into its output with process_vm_readv (cross-memory attach). Each byte
// crosses between processes once, where the slots (allgather.cpp) copy it twice, into the sender's slot
// and out of it. Which is faster depends on the machine: on this project's 2-vCPU VMs it took 0.59-0.87
// of the slots' time at 64 KiB-1 MiB on 2 ranks and 0.66-0.85 at 4-16 MiB, and lost with 4 ranks on the
// 2 cores (every rank waits until all its readers are done). So the default rule takes it where the arena
// timed one copy faster and every rank has a core of its own (algorithm_table.cpp).
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"

namespace hier::transport::shm {

void allgatherSingleCopy(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs) {
  const int n = arena.size(), r = arena.rank();
  const uint32_t done = uint32_t(arena.nextChunk() + 1);
  const Deadline& deadline = c.deadline();

  arena.publish(input.data, input.bytes());
  arena.post(NodeArena::Posted, done);
  if (outputs[size_t(r)].data != input.data && input.bytes() != 0) {
    std::memcpy(outputs[size_t(r)].data, input.data, input.bytes());
  }
  for (int k = 1; k < n; ++k) {
    // Each rank starts with the next one up, so that no part is read by every rank at once.
    const int p = (r + k) % n;
    arena.waitOne(p, NodeArena::Posted, done, deadline);
    if (outputs[size_t(p)].bytes() != 0) arena.readFrom(p, outputs[size_t(p)].data, outputs[size_t(p)].bytes());
  }
  arena.post(NodeArena::Released, done);
  // The caller may change its input once this returns: every peer must have read it by then.
  arena.waitAll(NodeArena::Released, done, deadline);
  arena.consumeChunks(1);
}

}  // namespace hier::transport::shm
