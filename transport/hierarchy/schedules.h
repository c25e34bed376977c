// The hierarchical schedules (see planner.h), one file each, written once for host and device memory.
// Each runs as part of collective `c` on the whole group: its network steps on c's rail (or leaders)
// group over host memory, its node steps and staging through `node` (node_steps.h), which also decides
// where the buffers live. The other arguments are those of the flat collective of the same name in
// collectives.h; `premultiply` is PREMUL_SUM's factor (op SUM), when the caller has not applied it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "transport/collective.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/types.h"

namespace hier::transport::hierarchy {

void allreduceSplitRail(Collective& c, NodeSteps& node, const Buffer& data, ReduceOp op,
                        std::optional<double> premultiply = std::nullopt);
void allreduceLeaders(Collective& c, NodeSteps& node, const Buffer& data, ReduceOp op,
                      std::optional<double> premultiply = std::nullopt);
void allgatherRails(Collective& c, NodeSteps& node, const Buffer& input, const std::vector<Buffer>& outputs);
void reduceScatterRails(Collective& c, NodeSteps& node, const std::vector<Buffer>& inputs, const Buffer& output,
                        ReduceOp op, std::optional<double> premultiply = std::nullopt);
void broadcastRails(Collective& c, NodeSteps& node, const Buffer& data, int root);
void reduceRails(Collective& c, NodeSteps& node, const Buffer& input, const Buffer& output, ReduceOp op, int root,
                 std::optional<double> premultiply = std::nullopt);

// All-to-all across hosts, on host memory only (the CUDA path stages all-to-all through the host):
// the parts for another host travel in one message per pair of carriers (alltoall_carried.cpp). `known`
// as in collectives.h.
enum class Carriers { Rails, Leaders };
void alltoallCarried(Collective& c, Carriers carriers, const std::vector<Buffer>& inputs,
                     const std::vector<Buffer>& outputs, const std::vector<uint64_t>* known);

}  // namespace hier::transport::hierarchy
