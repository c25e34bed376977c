// Reduce-scatter through shared memory: per chunk, every rank copies the chunk of each other rank's
// input block into its slot (block p's piece at offset p C/n), then reduces its own block's piece from
// its input and every other slot straight into its output. The inputs are read once, the output written
// once, and a rank's own block never copied.
#include <algorithm>
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"
#include "transport/reduce/reduce.h"

namespace hier::transport::shm {

void reduceScatter(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output,
                   ReduceOp op) {
  const int n = arena.size(), r = arena.rank();
  const size_t elementBytes = elementSize(output.dtype);
  const size_t pieceElements = std::max<size_t>(1, arena.slotBytes() / size_t(n) / elementBytes);
  size_t largest = 0;
  for (const Buffer& in : inputs) largest = std::max(largest, in.count);
  const uint64_t chunks = (largest + pieceElements - 1) / pieceElements;
  const Deadline& deadline = c.deadline();
  auto piece = [&](size_t total, uint64_t k) {
    return k * pieceElements < total ? std::min(pieceElements, total - k * pieceElements) : 0;
  };

  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;
    const uint32_t done = uint32_t(g + 1);
    if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
    char* slot = arena.slot(r, g);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;  // its own block this rank reduces from its input
      const Buffer& in = inputs[size_t(p)];
      std::memcpy(slot + size_t(p) * pieceElements * elementBytes, in.bytePtr() + k * pieceElements * elementBytes,
                  piece(in.count, k) * elementBytes);
    }
    arena.post(NodeArena::Posted, done);

    arena.waitAll(NodeArena::Posted, done, deadline);
    const size_t count = piece(output.count, k);
    char* out = output.bytePtr() + k * pieceElements * elementBytes;
    const size_t at = size_t(r) * pieceElements * elementBytes;
    // This rank's own contribution straight from its input (which the output may be), then every other
    // rank's piece of this block, from the slots, in the same order on every call.
    const char* sofar = inputs[size_t(r)].bytePtr() + k * pieceElements * elementBytes;
    for (int j = 1; j < n; ++j) {
      reduce(out, sofar, arena.slot((r + j) % n, g) + at, count, output.dtype, op);
      sofar = out;
    }
    if (sofar != out && count != 0) std::memcpy(out, sofar, count * elementBytes);
    if (op == ReduceOp::Avg) finishAverage(out, count, output.dtype, n);
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
