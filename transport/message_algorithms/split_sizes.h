// All-to-all's split sizes, shared and checked before any data moves: a pair of ranks whose sizes
// disagree then makes every rank refuse the call alike, where the data exchange would fail only at that
// pair's receiver. Every all-to-all algorithm starts here.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/base/types.h"
#include "transport/group/collective.h"

namespace hier::transport::algorithms {

// Every rank's split sizes: sizes[2n s + d] is what rank s sends to rank d, sizes[2n s + n + d] what
// rank s expects from rank d. Throws InvalidUsage naming the first pair that does not match (`names`
// maps an index to the rank to name; empty: the index itself), so that every rank holding the same
// sizes raises the same error. Returns the largest part.
uint64_t checkSplitSizes(const std::vector<uint64_t>& sizes, int n, const std::vector<int>& names = {});

// Shares every rank's split sizes (what it sends to and expects from each rank: one small allgather of
// 16 n bytes a rank), checks them (checkSplitSizes, naming the group's ranks), and returns them; given
// them `known` (checked by the caller: the plugin's agreement carried them), a copy of those.
std::vector<uint64_t> splitSizeTable(Collective& c, const std::vector<Buffer>& inputs,
                                     const std::vector<Buffer>& outputs, const std::vector<uint64_t>* known);
// The same, returning only the largest part.
uint64_t shareSplitSizes(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                         const std::vector<uint64_t>* known);

}  // namespace hier::transport::algorithms
