// All-to-all with one copy: every rank writes where each of its outgoing parts lies into its slot and
// posts; every other rank copies the part meant for it straight into its output with process_vm_readv
// (cross-memory attach). Each byte crosses between processes once, where the slots (alltoall.cpp) copy it
// twice, into the sender's slot and out of it, a slot's share at a time. Parts may differ in size: as
// there, the ranks first share the sizes (unless the caller knows them), so that every rank sees a pair
// that does not match, and refuses, before any data moves. Which way is faster depends on the machine:
// this is the default where the arena did not time one copy slow (NodeArena::singleCopyFast;
// docs/measurements.md).
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"
#include "transport/message_algorithms/split_sizes.h"

namespace hier::transport::shm {

void alltoallSingleCopy(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs,
                        const std::vector<Buffer>& outputs, const std::vector<uint64_t>* known) {
  const int n = arena.size(), r = arena.rank();
  algorithms::shareSplitSizes(c, inputs, outputs, known);
  const uint64_t g = arena.nextChunk();
  const uint32_t done = uint32_t(g + 1);
  const Deadline& deadline = c.deadline();

  // This rank's slot of chunk g was last read two chunks ago.
  if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
  arena.publishParts(g, inputs);
  arena.post(NodeArena::Posted, done);
  const Buffer& ownIn = inputs[size_t(r)];
  if (outputs[size_t(r)].data != ownIn.data && ownIn.bytes() != 0) {
    std::memmove(outputs[size_t(r)].data, ownIn.data, ownIn.bytes());
  }
  for (int k = 1; k < n; ++k) {
    // Each rank starts with the next one up, so that no rank is read by every other at once.
    const int p = (r + k) % n;
    arena.waitOne(p, NodeArena::Posted, done, deadline);
    arena.readPart(p, g, r, outputs[size_t(p)].data, outputs[size_t(p)].bytes());
  }
  arena.post(NodeArena::Released, done);
  // The caller may change its inputs once this returns: every peer must have read them by then.
  arena.waitAll(NodeArena::Released, done, deadline);
  arena.consumeChunks(1);
}

}  // namespace hier::transport::shm
