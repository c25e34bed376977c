// The collectives the plugin calls: each checks its arguments, picks an algorithm from its collective's
// table (algorithm_table.h) and runs it. Every rank of the communicator must make the same call, in the
// same order, with matching sizes.
#pragma once

#include <vector>

#include "transport/collective.h"
#include "transport/types.h"

namespace hier::transport {

void allreduce(Collective& c, const Buffer& data, ReduceOp op);
void reduce(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root);
void broadcast(Collective& c, const Buffer& data, int root);
void allgather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs);
void gather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs, int root);
void scatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, int root);
void reduceScatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op);
void alltoall(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs);
void barrier(Collective& c);

}  // namespace hier::transport
