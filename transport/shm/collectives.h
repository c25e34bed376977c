// Collectives through a NodeArena: every rank of the communicator on this host. One file per
// algorithm. The buffers are cut into chunks that fit a slot; chunks go through the two slots of each
// rank in turn, so a rank fills one slot while the others still read the previous one.
#pragma once

#include <vector>

#include "transport/collective.h"
#include "transport/shm/node_arena.h"
#include "transport/types.h"

namespace hier::transport::shm {

void allreduce(Collective& c, NodeArena& arena, const Buffer& data, ReduceOp op);
void reduce(Collective& c, NodeArena& arena, const Buffer& input, const Buffer& output, ReduceOp op, int root);
void broadcast(Collective& c, NodeArena& arena, const Buffer& data, int root);
void allgather(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs);
void reduceScatter(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output,
                   ReduceOp op);
void alltoall(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs);

}  // namespace hier::transport::shm
