// The steps the arena's reductions (allreduce, reduce, reduce_at_root) share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/arena/node_arena.h"
#include "transport/base/deadline.h"
#include "transport/base/even_ranges.h"
#include "transport/base/types.h"

namespace hier::transport::shm {

// How many elements of `dtype` the reductions take a chunk at a time: a slot's worth, but at most 128
// KiB, so that what a rank touches for one chunk (the chunk of its input, its slot, its peers' parts,
// its output) stays in its core's L2 cache from copying in to copying out (docs/measurements.md).
size_t reduceChunkElements(const NodeArena& arena, DataType dtype);

// For `chunk` in the slots of chunk number `g`; `parts` divide the chunk among the ranks.
// reducePartsInSlots: once the slots are free, copies the chunk into this rank's slot and, once every
// rank has, reduces this rank's part over every slot, in place in its own slot. copyReducedParts: once
// every rank has reduced its part, copies each part out of its reducer's slot.
void reducePartsInSlots(NodeArena& arena, uint64_t g, const Buffer& chunk, const std::vector<Range>& parts, ReduceOp op,
                        const Deadline& deadline);
void copyReducedParts(NodeArena& arena, uint64_t g, const Buffer& out, const std::vector<Range>& parts,
                      const Deadline& deadline);

}  // namespace hier::transport::shm
