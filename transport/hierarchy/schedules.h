// The hierarchical schedules (see planner.h), one file each. Each runs as a step of collective `c` on
// the communicator's node and rail (or leaders) sub-communicators; the arguments are those of the
// flat collective of the same name in collectives.h.
#pragma once

#include <vector>

#include "transport/collective.h"
#include "transport/types.h"

namespace hier::transport::hierarchy {

void allreduceSplitRail(Collective& c, const Buffer& data, ReduceOp op);
void allreduceLeaders(Collective& c, const Buffer& data, ReduceOp op);
void allgatherRails(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs);
void reduceScatterRails(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op);
void broadcastRails(Collective& c, const Buffer& data, int root);
void reduceRails(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root);

}  // namespace hier::transport::hierarchy
