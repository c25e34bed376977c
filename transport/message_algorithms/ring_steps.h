// The two halves of the ring algorithms, which allreduce, reduce, reduce_scatter and allgather share.
#pragma once

#include <cstddef>
#include <vector>

#include "transport/base/types.h"
#include "transport/group/collective.h"

namespace hier::transport::algorithms {

// The ring's reduction: result (on this rank) = reduction of every rank's input[rank]. Partial sums of
// the blocks passing through go to work[b] (which may alias input[b]); received fragments land in
// `receiveArea`, two fragments of `chunkElements` each.
void ringReduceScatter(Collective& c, const std::vector<Buffer>& input, const std::vector<Buffer>& work,
                       const Buffer& result, ReduceOp op, size_t chunkElements, char* receiveArea);
// The ring's exchange, once blocks[rank] already holds this rank's part.
void ringAllgather(Collective& c, const std::vector<Buffer>& blocks);

}  // namespace hier::transport::algorithms
