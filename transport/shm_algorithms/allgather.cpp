// Allgather through shared memory: per chunk, every rank copies its part's chunk into its slot, then
// copies every other rank's chunk out into place. Parts may differ in size; chunk k covers bytes
// [k C, (k+1) C) of every part, C being the slot size.
#include <algorithm>
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"

namespace hier::transport::shm {

void allgather(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs) {
  const int n = arena.size(), r = arena.rank();
  const size_t chunkBytes = arena.slotBytes();
  size_t largest = 0;
  for (const Buffer& out : outputs) largest = std::max(largest, out.bytes());
  const uint64_t chunks = (largest + chunkBytes - 1) / chunkBytes;
  const Deadline& deadline = c.deadline();
  auto piece = [&](size_t total, uint64_t k) {
    return k * chunkBytes < total ? std::min(chunkBytes, total - k * chunkBytes) : 0;
  };

  const bool copyOwn = outputs[size_t(r)].data != input.data;
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;
    const uint32_t done = uint32_t(g + 1);
    if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
    const size_t length = piece(input.bytes(), k);
    std::memcpy(arena.slot(r, g), input.bytePtr() + k * chunkBytes, length);
    arena.post(NodeArena::Posted, done);
    // This rank's own part from the slot it just wrote, still in cache: the input is read from memory once.
    if (copyOwn && length != 0) std::memcpy(outputs[size_t(r)].bytePtr() + k * chunkBytes, arena.slot(r, g), length);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      arena.waitOne(p, NodeArena::Posted, done, deadline);
      std::memcpy(outputs[size_t(p)].bytePtr() + k * chunkBytes, arena.slot(p, g),
                  piece(outputs[size_t(p)].bytes(), k));
    }
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
