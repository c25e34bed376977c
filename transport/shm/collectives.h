// Collectives through a NodeArena: every rank of the communicator on this host. One file per
// algorithm. The buffers are cut into chunks that fit a slot; chunks go through the two slots of each
// rank in turn, so a rank fills one slot while the others still read the previous one.
#pragma once

#include <vector>

#include "transport/algorithms/algorithms.h"
#include "transport/collective.h"
#include "transport/shm/node_arena.h"
#include "transport/types.h"

namespace hier::transport::shm {

void allreduce(Collective& c, NodeArena& arena, const Buffer& data, ReduceOp op);
// Only where arena.crossMemoryAttach().
void allreduceSingleCopy(Collective& c, NodeArena& arena, const Buffer& data, ReduceOp op);
void reduce(Collective& c, NodeArena& arena, const Buffer& input, const Buffer& output, ReduceOp op, int root);
// The root alone reduces, from the others' slots.
void reduceAtRoot(Collective& c, NodeArena& arena, const Buffer& input, const Buffer& output, ReduceOp op,
                  int root);
void broadcast(Collective& c, NodeArena& arena, const Buffer& data, int root);
// Only where arena.crossMemoryAttach().
void broadcastSingleCopy(Collective& c, NodeArena& arena, const Buffer& data, int root);
// Only where arena.crossMemoryAttach().
void broadcastSplitCopy(Collective& c, NodeArena& arena, const Buffer& data, int root);
void allgather(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs);
// Only where arena.crossMemoryAttach().
void allgatherSingleCopy(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs);
// Every rank's part as large as every other's: the chunks are counted from this rank's own buffer.
void gather(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs, int root);
// Only where arena.crossMemoryAttach().
void gatherWriteCopy(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs,
                     int root);
void scatter(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output, int root);
// Only where arena.crossMemoryAttach().
void scatterSingleCopy(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output,
                       int root);
void reduceScatter(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output,
                   ReduceOp op);
void alltoall(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
              const std::vector<uint64_t>* known);
// Only where arena.crossMemoryAttach().
void alltoallSingleCopy(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs,
                        const std::vector<Buffer>& outputs, const std::vector<uint64_t>* known);

// How many elements of `dtype` the reductions (allreduce, reduce, reduceAtRoot) take a chunk at a time: a
// slot's worth, but at most 128 KiB. What a rank touches for one chunk (the chunk of its input, its slot,
// its peers' parts, its output) then stays in its core's L2 cache (1 MiB a core on the build VM) from
// copying in to copying out. Against the default slot's 512 KiB, allreduce took 0.66-0.96 of the time from
// 512 KiB to 64 MiB, 2 ranks and 4 on the 2 cores (README, "Algorithms"). Reduce-scatter and the
// collectives that only copy showed no consistent difference.
size_t reduceChunkElements(const NodeArena& arena, DataType dtype);

// The steps allreduce and reduce share, for `chunk` in the slots of chunk number `g`; `parts` divide the
// chunk among the ranks. reducePartsInSlots: once the slots are free, copies the chunk into this rank's
// slot and, once every rank has, reduces this rank's part over every slot, in place in its own slot.
// copyReducedParts: once every rank has reduced its part, copies each part out of its reducer's slot.
void reducePartsInSlots(NodeArena& arena, uint64_t g, const Buffer& chunk, const std::vector<algorithms::Range>& parts,
                        ReduceOp op, const Deadline& deadline);
void copyReducedParts(NodeArena& arena, uint64_t g, const Buffer& out, const std::vector<algorithms::Range>& parts,
                      const Deadline& deadline);

}  // namespace hier::transport::shm
