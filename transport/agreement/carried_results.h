// What a small collective computes from the pieces its agreement carried (agreement.h): every rank's
// contribution is on every rank, so the results are copies and reductions of them, and nothing more
// moves. Torch-free: the plugin's host collectives pass their tensors' bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "transport/agreement/agreement.h"
#include "transport/base/types.h"

namespace hier::transport::carried {

using Bytes = std::span<const std::byte>;
using Pieces = std::vector<Bytes>;

// The bytes of a table of sizes, as a part of a piece.
Bytes bytesOf(const std::vector<uint64_t>& values);

// A rank's part is not the size this rank expects (ranks whose calls differ in a way the agreement does
// not see): Error(Mismatch).
[[noreturn]] void misfit(const char* what, size_t got, size_t want);

// Copies `from` into `to`, which must be as large (and may be the same memory: a root's own part).
void copyInto(Bytes from, const Buffer& to);
// Copies rank r's carried piece into outs[r], for every rank.
void copyEach(const Carried& all, const std::vector<Buffer>& outs);

// A piece made of several parts, each found again by its index: a table of the parts' ends, then the
// parts. `table` must live as long as the returned views.
Pieces withPartTable(const Pieces& parts, std::vector<uint64_t>& table);
// The table's size for `parts` parts.
size_t partTableBytes(size_t parts);
// Part `index` of a piece of `parts` parts made by withPartTable().
Bytes partOf(Bytes piece, size_t index, size_t parts);

// `out` = every rank's piece (its elements from element `first` on) reduced in rank order, the same
// order on every rank, so all of them end with the same bits.
void reduceCarried(const Carried& all, size_t first, const Buffer& out, ReduceOp op);
// A rooted reduction's result at the root: its own input, then every other rank's carried piece, in rank
// order from the root on (the order the arena's reduce_at_root takes). Only the root has a result, so
// no other rank's bits need to match it, and the root carries nothing of its own.
void reduceCarriedAtRoot(const Carried& all, int root, const Buffer& own, const Buffer& out, ReduceOp op);

}  // namespace hier::transport::carried
