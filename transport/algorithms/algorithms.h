// The collective algorithms over a Collective's sends and receives. Each is written once, for host
// memory, in its own file; collectives.cpp chooses between them by size. Every rank of the communicator
// must call the same algorithm with matching sizes.
//
// Per-rank parts are passed as one Buffer per rank, so uneven sizes (all_to_all splits, list forms
// with unequal tensors) need no special case.
#pragma once

#include <cstddef>
#include <vector>

#include "transport/collective.h"
#include "transport/types.h"

namespace hier::transport::algorithms {

// `count` elements in `parts` consecutive ranges whose sizes differ by at most one, the larger first.
struct Range {
  size_t offset;
  size_t count;
};
std::vector<Range> evenRanges(size_t count, int parts);
// Splits `data` into the blocks of evenRanges().
std::vector<Buffer> splitEvenly(const Buffer& data, int parts);

// Reduces every rank's `data` into every rank's `data`.
void allreduceRecursiveDoubling(Collective& c, const Buffer& data, ReduceOp op);
void allreduceRing(Collective& c, const Buffer& data, ReduceOp op, size_t chunkBytes);

// Reduces every rank's `input` into `output` on `root` (output is ignored elsewhere; may alias input).
void reduceBinomial(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root);
void reduceRing(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root, size_t chunkBytes);

// Copies `root`'s `data` into every rank's `data`.
void broadcastBinomial(Collective& c, const Buffer& data, int root);
void broadcastChain(Collective& c, const Buffer& data, int root, size_t chunkBytes);

// outputs[p] receives rank p's input (outputs[rank] may alias input).
void allgatherDirect(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs);
void allgatherRing(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs);
// The ring's exchange, once blocks[rank] already holds this rank's part.
void ringAllgather(Collective& c, const std::vector<Buffer>& blocks);

// output on rank p is the reduction of every rank's inputs[p].
void reduceScatterRing(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op,
                       size_t chunkBytes);
// The ring's reduction: result (on this rank) = reduction of every rank's input[rank]. Partial sums of
// the blocks passing through go to work[b] (which may alias input[b]); received fragments land in
// `receiveArea`, two fragments of `chunkElements` each.
void ringReduceScatter(Collective& c, const std::vector<Buffer>& input, const std::vector<Buffer>& work,
                       const Buffer& result, ReduceOp op, size_t chunkElements, char* receiveArea);

// outputs[p] on root receives rank p's input.
void gatherLinear(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs, int root);
// output on rank p receives root's inputs[p].
void scatterLinear(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, int root);
// outputs[p] receives rank p's inputs[rank].
void alltoallPairwise(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                      const std::vector<uint64_t>* known);

void barrierDissemination(Collective& c);

}  // namespace hier::transport::algorithms
