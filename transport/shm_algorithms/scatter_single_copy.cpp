// Scatter with one copy: the root writes where each rank's part lies into its slot and posts; every other
// rank copies its part straight into its output with process_vm_readv (cross-memory attach), all at once.
// Through the slots (scatter.cpp) the root copies every byte in and its receiver copies it out. Which way
// is faster depends on the machine: this is the default where the arena did not time one copy slow
// (NodeArena::singleCopyFast; docs/measurements.md).
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"

namespace hier::transport::shm {

void scatterSingleCopy(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output,
                       int root) {
  const int r = arena.rank();
  const uint64_t g = arena.nextChunk();
  const uint32_t done = uint32_t(g + 1);
  const Deadline& deadline = c.deadline();
  arena.requirePartTable(size_t(arena.size()));

  if (r == root) {
    // The root's slot of chunk g was last read two chunks ago.
    if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
    arena.publishParts(g, inputs);
    arena.post(NodeArena::Posted, done);
    if (output.data != inputs[size_t(r)].data && output.bytes() != 0) {
      std::memcpy(output.data, inputs[size_t(r)].data, output.bytes());
    }
    arena.post(NodeArena::Released, done);
    // The caller may change its inputs once this returns: every rank must have read its part by then.
    arena.waitAll(NodeArena::Released, done, deadline);
  } else {
    arena.waitOne(root, NodeArena::Posted, done, deadline);
    arena.readPart(root, g, r, output.data, output.bytes());
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(1);
}

}  // namespace hier::transport::shm
