// The collectives on host memory that the plugin calls: each checks its arguments, chooses its row from
// its collective's table (algorithm_table.h), once, and runs it: a hierarchical schedule with its node
// steps in host memory, or one of the group's own algorithms. Every rank of the group must make the same
// call, in the same order, with matching sizes; a gather's or a scatter's parts are all of one size.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/base/types.h"
#include "transport/group/collective.h"

namespace hier::transport {

void allreduce(Collective& c, const Buffer& data, ReduceOp op);
void reduce(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root);
void broadcast(Collective& c, const Buffer& data, int root);
void allgather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs);
void gather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs, int root);
void scatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, int root);
void reduceScatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op);
// `known`: every rank's split sizes (message_algorithms/split_sizes.h), already checked by the caller
// (the plugin's agreement carried them); null: the algorithm shares and checks them itself.
void alltoall(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
              const std::vector<uint64_t>* known = nullptr);
void barrier(Collective& c);

}  // namespace hier::transport
