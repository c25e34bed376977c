// The collectives the plugin calls: each checks its arguments, picks an algorithm by size from the
// settings (settings.h) and runs it. Every rank of the communicator must make the same call, in the
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

// Which allreduce algorithm a size calls for; exposed for logs, tests and the benchmark's report.
enum class AllreduceAlgorithm { Local, RecursiveDoubling, Ring };
AllreduceAlgorithm chooseAllreduce(size_t bytes, size_t count, int size);
const char* toString(AllreduceAlgorithm algorithm);

}  // namespace hier::transport
