// Scatter through shared memory: per chunk, the root copies a piece of each other rank's part into its
// slot (rank d's piece at offset d C/n), and every other rank copies its own piece out. Every rank's part
// is as large as every other's (the caller's agreement guarantees it), so each rank counts the same
// chunks from its own output. The root copies each byte in, its receiver copies it out, at once.
#include <algorithm>
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"

namespace hier::transport::shm {

void scatter(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output, int root) {
  const int n = arena.size(), r = arena.rank();
  const size_t pieceBytes = arena.slotBytes() / size_t(n);
  const uint64_t chunks = (output.bytes() + pieceBytes - 1) / pieceBytes;
  const Deadline& deadline = c.deadline();

  // The root copies its own part once its first chunk is posted: meanwhile the others copy theirs out.
  auto copyOwnPart = [&] {
    if (r == root && inputs[size_t(r)].data != output.data && output.bytes() != 0) {
      std::memcpy(output.data, inputs[size_t(r)].data, output.bytes());
    }
  };
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;
    const uint32_t done = uint32_t(g + 1);
    const size_t first = k * pieceBytes, length = std::min(pieceBytes, output.bytes() - first);
    if (r == root) {
      if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
      for (int d = 0; d < n; ++d) {
        if (d != root)
          std::memcpy(arena.slot(r, g) + size_t(d) * pieceBytes, inputs[size_t(d)].bytePtr() + first, length);
      }
      arena.post(NodeArena::Posted, done);
      if (k == 0) copyOwnPart();
    } else {
      arena.waitOne(root, NodeArena::Posted, done, deadline);
      std::memcpy(output.bytePtr() + first, arena.slot(root, g) + size_t(r) * pieceBytes, length);
    }
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
