// Reduce through shared memory with the root reducing: per chunk, every rank but the root copies its
// input's chunk into its slot and goes on; the root reduces the slots straight into its output, onto its
// own input. Where the slots' reduce (reduce.cpp) has every rank copy in, reduce a part and the root copy
// every part out, this one copies only the others' inputs, once, and both cores work at once: the
// senders copy the next chunk in while the root reduces this one. The root alone reduces, so with many
// ranks the slots' way, which shares the reducing, wins.
#include <algorithm>
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"
#include "transport/reduce/reduce.h"
#include "transport/shm_algorithms/slot_reduction.h"

namespace hier::transport::shm {
void reduceAtRoot(Collective& c, NodeArena& arena, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  const int n = arena.size(), r = arena.rank();
  const size_t elementBytes = elementSize(input.dtype);
  // Chunks smaller than a slot (reduceChunkElements): the root starts reducing once the first is in.
  const size_t chunkElements = reduceChunkElements(arena, input.dtype);
  const uint64_t chunks = (input.count + chunkElements - 1) / chunkElements;
  const Deadline& deadline = c.deadline();

  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;
    const uint32_t done = uint32_t(g + 1);
    const size_t first = k * chunkElements, count = std::min(chunkElements, input.count - first);
    const size_t offset = first * elementBytes;
    if (r != root) {
      // The slot was last read two chunks ago, by whichever ranks that collective had read it.
      if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
      std::memcpy(arena.slot(r, g), input.bytePtr() + offset, count * elementBytes);
      arena.post(NodeArena::Posted, done);
    } else {
      const char* sofar = input.bytePtr() + offset;  // the root's own contribution first
      char* into = output.bytePtr() + offset;
      // Peers in the order after the root, the same on every call: the same inputs give the same bits.
      for (int j = 1; j < n; ++j) {
        const int p = (root + j) % n;
        arena.waitOne(p, NodeArena::Posted, done, deadline);
        reduce(into, sofar, arena.slot(p, g), count, input.dtype, op);
        sofar = into;
      }
      if (op == ReduceOp::Avg) finishAverage(into, count, input.dtype, n);
    }
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
