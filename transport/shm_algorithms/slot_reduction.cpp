#include "transport/shm_algorithms/slot_reduction.h"

#include <algorithm>
#include <cstring>

#include "transport/reduce/reduce.h"

namespace hier::transport::shm {

void reducePartsInSlots(NodeArena& arena, uint64_t g, const Buffer& chunk, const std::vector<Range>& parts, ReduceOp op,
                        const Deadline& deadline) {
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

void copyReducedParts(NodeArena& arena, uint64_t g, const Buffer& out, const std::vector<Range>& parts,
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

}  // namespace hier::transport::shm
