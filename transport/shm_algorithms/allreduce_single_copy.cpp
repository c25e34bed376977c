// Allreduce with one copy each way: every rank publishes its buffer and posts; rank r reduces part r,
// reading that part of every peer's buffer with process_vm_readv (cross-memory attach) a cache-sized
// piece at a time into scratch memory and reducing it into its own buffer; once a peer posts that its
// part is reduced, every rank copies that part straight out of the peer's buffer into its own.
//
// Why: the slots (allreduce.cpp) copy every byte into a slot and out of one, which on 2 ranks is about
// 4.5 passes over memory per byte of the buffer; this is 2.5 (a read and write of the peer's part, which
// stays in the cache, a pass to reduce, and the copy of the peer's reduced part). Each element is still
// reduced by one rank only, so every rank gets the same bits.
//
// A rank overwrites part p of its buffer only after rank p posted Reduced, that is after rank p read that
// part, and no rank reads part p from anyone but rank p once it is reduced; a rank returns only after
// every peer has read its reduced part.
#include <algorithm>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"
#include "transport/reduce/reduce.h"
#include "transport/shm_algorithms/slot_reduction.h"

namespace hier::transport::shm {

void allreduceSingleCopy(Collective& c, NodeArena& arena, const Buffer& data, ReduceOp op) {
  const int n = arena.size(), r = arena.rank();
  const uint32_t done = uint32_t(arena.nextChunk() + 1);
  const Deadline& deadline = c.deadline();
  const size_t elementBytes = elementSize(data.dtype);
  const auto parts = evenRanges(data.count, n);

  arena.publish(data.data, data.bytes());
  arena.post(NodeArena::Posted, done);

  // This rank's part, a cache-sized piece at a time: each peer's piece into the scratch area, reduced
  // into this rank's buffer. The peers in the same order on every rank's part, this rank's own value
  // first, as the slots do.
  const size_t pieceElements = reduceChunkElements(arena, data.dtype);
  const Range mine = parts[size_t(r)];
  char* scratch = c.scratch(std::min(mine.count, pieceElements) * elementBytes);
  for (int k = 1; k < n; ++k) arena.waitOne((r + k) % n, NodeArena::Posted, done, deadline);
  for (size_t at = 0; at < mine.count; at += pieceElements) {
    const size_t count = std::min(pieceElements, mine.count - at);
    const size_t offset = (mine.offset + at) * elementBytes;
    char* into = data.bytePtr() + offset;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      arena.readPartFrom(p, offset, scratch, count * elementBytes, data.bytes());
      reduce(into, into, scratch, count, data.dtype, op);
    }
    if (op == ReduceOp::Avg) finishAverage(into, count, data.dtype, n);
  }
  arena.post(NodeArena::Reduced, done);

  // Every other part, from the rank that reduced it, in one copy.
  for (int k = 1; k < n; ++k) {
    // Each rank starts with the next one up, so that no part is read by every rank at once.
    const int p = (r + k) % n;
    const size_t at = parts[size_t(p)].offset * elementBytes, bytes = parts[size_t(p)].count * elementBytes;
    arena.waitOne(p, NodeArena::Reduced, done, deadline);
    if (bytes != 0) arena.readPartFrom(p, at, data.bytePtr() + at, bytes, data.bytes());
  }
  arena.post(NodeArena::Released, done);
  // A peer may still be reading this rank's reduced part: the caller may change the buffer once this
  // returns.
  arena.waitAll(NodeArena::Released, done, deadline);
  arena.consumeChunks(1);
}

}  // namespace hier::transport::shm
