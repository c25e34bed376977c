#include "transport/hierarchy/reduction_stages.h"

#include "transport/reduce/reduce.h"

namespace hier::transport::hierarchy {

ReductionStages reductionStages(ReduceOp op, std::optional<double> premultiply, int groupSize,
                                bool nodeScalesContributions) {
  ReductionStages stages;
  if (premultiply) {
    if (nodeScalesContributions)
      stages.node.scale = *premultiply;
    else
      stages.multiplyBy = *premultiply;
    return stages;
  }
  if (op == ReduceOp::Avg) {
    if (nodeScalesContributions)
      stages.node.scale = 1.0 / double(groupSize);
    else
      stages.divideBy = groupSize;
    return stages;
  }
  stages.node.op = op;
  stages.network = op;
  return stages;
}

bool everyNodeScales(const NodeSteps& node, const Topology& topology, DataType dtype) {
  for (const auto& ranks : topology.nodes) {
    if (!node.scalesContributions(dtype, int(ranks.size()))) return false;
  }
  return true;
}

ReductionStages reductionStages(ReduceOp op, std::optional<double> premultiply, const Topology& topology,
                                const NodeSteps& node, DataType dtype) {
  return reductionStages(op, premultiply, topology.size(), everyNodeScales(node, topology, dtype));
}

void ReductionStages::finish(const Buffer& data) const {
  if (divideBy != 1) finishAverage(data.data, data.count, data.dtype, divideBy);
  if (multiplyBy) scale(data.data, data.data, data.count, data.dtype, *multiplyBy);
}

}  // namespace hier::transport::hierarchy
