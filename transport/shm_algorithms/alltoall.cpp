// All-to-all through shared memory: per chunk, every rank copies a piece of each of its n - 1 outgoing
// parts into its slot (its own part goes straight to its output, so the slot holds only the others':
// part d's piece at offset seat(r, d) C/(n - 1)), then copies from every other rank's slot the piece
// meant for it. Parts may differ in size. No rank knows the sizes between two others, so the ranks
// first share them (shareSplitSizes: one small allgather over UCX, unless the caller knows them): that
// sets the number of chunks (the largest part anywhere decides), and lets every rank see at once, and
// alike, a pair of ranks whose sizes do not match. They all refuse the call then, before any data
// moved; without the check the receiver would take the wrong bytes and say nothing.
#include <algorithm>
#include <cstring>

#include "transport/arena/node_arena.h"
#include "transport/group/collective.h"
#include "transport/message_algorithms/split_sizes.h"

namespace hier::transport::shm {

void alltoall(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
              const std::vector<uint64_t>* known) {
  const int n = arena.size(), r = arena.rank();
  // Where the piece that rank `from` sends rank `to` sits in `from`'s slot: its own seat skipped.
  auto seat = [](int from, int to) { return size_t(to < from ? to : to - 1); };
  // A whole number of cache lines where there is room, so that every piece starts on a line of its own.
  const size_t share = arena.slotBytes() / size_t(std::max(n - 1, 1));
  const size_t pieceBytes = share >= 64 ? share / 64 * 64 : share;
  const uint64_t largest = algorithms::shareSplitSizes(c, inputs, outputs, known);
  const uint64_t chunks = (largest + pieceBytes - 1) / pieceBytes;
  const Deadline& deadline = c.deadline();
  auto piece = [&](size_t total, uint64_t k) {
    return k * pieceBytes < total ? std::min(pieceBytes, total - k * pieceBytes) : 0;
  };

  const Buffer& ownIn = inputs[size_t(r)];
  if (outputs[size_t(r)].data != ownIn.data && ownIn.bytes() != 0) {
    std::memmove(outputs[size_t(r)].data, ownIn.data, ownIn.bytes());
  }
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t g = arena.nextChunk() + k;
    const uint32_t done = uint32_t(g + 1);
    if (g >= 2) arena.waitAll(NodeArena::Released, done - 2, deadline);
    char* slot = arena.slot(r, g);
    // An empty part's data may be null: copy only non-empty pieces (memcpy from null is undefined).
    for (int d = 0; d < n; ++d) {
      const size_t length = piece(inputs[size_t(d)].bytes(), k);
      if (d != r && length != 0) {
        std::memcpy(slot + seat(r, d) * pieceBytes, inputs[size_t(d)].bytePtr() + k * pieceBytes, length);
      }
    }
    arena.post(NodeArena::Posted, done);
    for (int s = 0; s < n; ++s) {
      if (s == r) continue;
      arena.waitOne(s, NodeArena::Posted, done, deadline);
      const size_t length = piece(outputs[size_t(s)].bytes(), k);
      if (length != 0) {
        std::memcpy(outputs[size_t(s)].bytePtr() + k * pieceBytes, arena.slot(s, g) + seat(s, r) * pieceBytes, length);
      }
    }
    arena.post(NodeArena::Released, done);
  }
  arena.consumeChunks(chunks);
}

}  // namespace hier::transport::shm
