// Allreduce through shared memory. Per chunk: every rank copies into its slot the parts of the chunk
// the other ranks reduce; rank r reduces part r over its own chunk and every other slot, into its own
// slot; every rank copies each part's result out of the slot of the rank that reduced it. The user's
// buffer is read once and written once; the slots stay in the cache. Each element is reduced by one rank
// only, so every rank gets the same bits.
#include <algorithm>
#include <cstring>

#include "transport/algorithms/algorithms.h"
#include "transport/reduce.h"
#include "transport/shm/collectives.h"

namespace hier::transport::shm {

void reducePartsInSlots(NodeArena& arena, uint64_t g, const Buffer& chunk, const std::vector<algorithms::Range>& parts,
                        ReduceOp op, const Deadline& deadline) {
  const int n = arena.size(), r = arena.rank();
  const uint32_t done = uint32_t(g + 1);  // what the counters say once this chunk's step is done
  // The slot last held chunk g-2: every rank must be done reading it.
  if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
  // This rank's own part is not copied in: no other rank reads it, and this one reads it from the chunk
  // (on 2 ranks, half of what was copied in).
  const size_t elementBytes = elementSize(chunk.dtype);
  const size_t offset = parts[size_t(r)].offset * elementBytes, count = parts[size_t(r)].count;
  const size_t after = offset + count * elementBytes;
  char* slot = arena.slot(r, g);
  std::memcpy(slot, chunk.data, offset);
  std::memcpy(slot + after, chunk.bytePtr() + after, chunk.bytes() - after);
  arena.post(NodeArena::Posted, done);

  arena.waitAll(NodeArena::Posted, done, deadline);
  char* mine = slot + offset;
  const char* first = chunk.bytePtr() + offset;  // the chunk's own part, then the slot's running result
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    reduce(mine, first, arena.slot(p, g) + offset, count, chunk.dtype, op);
    first = mine;
  }
  if (op == ReduceOp::Avg) finishAverage(mine, count, chunk.dtype, n);
  arena.post(NodeArena::Reduced, done);
}

void copyReducedParts(NodeArena& arena, uint64_t g, const Buffer& out, const std::vector<algorithms::Range>& parts,
                      const Deadline& deadline) {
  const size_t elementBytes = elementSize(out.dtype);
  arena.waitAll(NodeArena::Reduced, uint32_t(g + 1), deadline);
  for (int p = 0; p < arena.size(); ++p) {
    const size_t at = parts[size_t(p)].offset * elementBytes;
    std::memcpy(out.bytePtr() + at, arena.slot(p, g) + at, parts[size_t(p)].count * elementBytes);
  }
}

size_t reduceChunkElements(const NodeArena& arena, DataType dtype) {
  constexpr size_t kMostBytes = size_t(128) << 10;
  return std::max<size_t>(1, std::min(arena.slotBytes(), kMostBytes) / elementSize(dtype));
}

void allreduce(Collective& c, NodeArena& arena, const Buffer& data, ReduceOp op) {
  const size_t chunkElements = reduceChunkElements(arena, data.dtype);
  const uint64_t chunks = (data.count + chunkElements - 1) / chunkElements;
  const Deadline& deadline = c.deadline();

  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;  // numbered across operations: picks the slot
    const Buffer chunk = data.slice(k * chunkElements, std::min(chunkElements, data.count - k * chunkElements));
    const auto parts = algorithms::evenRanges(chunk.count, arena.size());
    reducePartsInSlots(arena, g, chunk, parts, op, deadline);
    copyReducedParts(arena, g, chunk, parts, deadline);
    arena.post(NodeArena::Released, uint32_t(g + 1));
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
