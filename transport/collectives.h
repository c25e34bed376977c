// The collectives the plugin calls: each checks its arguments, picks an algorithm from its collective's
// table (algorithm_table.h) and runs it. Every rank of the communicator must make the same call, in the
// same order, with matching sizes; a gather's or a scatter's parts are all of one size.
#pragma once

#include <cstdint>
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
// `known`: every rank's split sizes as checkSplitSizes reads them, already checked by the caller (the
// plugin's agreement carried them); null: the algorithm shares and checks them itself (shareSplitSizes).
void alltoall(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
              const std::vector<uint64_t>* known = nullptr);
void barrier(Collective& c);

// All-to-all's split sizes as every rank passed them: sizes[2n s + d] is what rank s sends to rank d,
// sizes[2n s + n + d] what rank s expects from rank d. Throws InvalidUsage naming the first pair that
// does not match (`names` maps an index to the rank to name; empty: the index itself), so that every
// rank holding the same sizes raises the same error. Returns the largest part.
uint64_t checkSplitSizes(const std::vector<uint64_t>& sizes, int n, const std::vector<int>& names = {});

// Shares every rank's split sizes (what it sends to and expects from each rank: one small allgather of
// 16 n bytes a rank), checks them (checkSplitSizes, naming the group's ranks), and returns the largest
// part; given them `known` (checked), only the latter. Run by an all-to-all before any data moves: a
// pair of ranks whose sizes disagree then makes every rank refuse the call alike, where the data
// exchange would fail only at that pair's receiver.
uint64_t shareSplitSizes(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                         const std::vector<uint64_t>* known);
// The same, returning every rank's split sizes as checkSplitSizes reads them (a copy of `known`, given
// them), for the algorithms that lay out other ranks' parts.
std::vector<uint64_t> splitSizeTable(Collective& c, const std::vector<Buffer>& inputs,
                                     const std::vector<Buffer>& outputs, const std::vector<uint64_t>* known);

}  // namespace hier::transport
