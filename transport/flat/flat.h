// A collective on one group, on host memory, by the default rule over the group's own algorithms
// (flat_table.h): what the steps of a hierarchical schedule run on its node, rail and leaders groups.
// Every rank of the group must make the same call, in the same order, with matching sizes.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "transport/base/types.h"
#include "transport/flat/shape.h"
#include "transport/group/collective.h"

namespace hier::transport::flat {

void allreduce(Collective& c, const Buffer& data, ReduceOp op);
void reduce(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root);
void broadcast(Collective& c, const Buffer& data, int root);
// outputs[p] receives rank p's input (outputs[rank] may alias input).
void allgather(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs);
// output on rank p is the reduction of every rank's inputs[p].
void reduceScatter(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op);

// The shape of a call of `bytes` in `count` elements on `c`'s group, host memory. The topology is learned
// once per group, by all its ranks together, so only a group with several ranks asks for it; the arena
// likewise, and only when an algorithm that would use it is wanted.
Shape shapeOf(Collective& c, size_t bytes, size_t count);
// HIER_DEBUG=DEBUG: every collective's algorithm; HIER_DEBUG=INFO: the first time a group uses each.
void trace(Collective& c, const char* op, std::string_view algorithm, size_t bytes);

}  // namespace hier::transport::flat
