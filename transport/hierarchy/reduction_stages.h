// How the stages of a hierarchical reduction reduce, so that together they compute `op` (PREMUL_SUM:
// SUM with every contribution multiplied by `premultiply`) over the whole group.
//
// SUM, PRODUCT, MIN, MAX and the bitwise ops reduce alike in every stage. AVG and PREMUL_SUM are sums
// with a factor: where the node can (NCCL, floating point), the first node step applies it to every
// contribution inside its reduction, as ProcessGroupNCCL's AVG and PREMUL_SUM do, so an fp16 or bf16
// sum never holds more than the scaled values (no overflow NCCL would not have). Elsewhere the stages
// sum and the factor is applied once at the end, on the host buffer of the network step (`finish`),
// which is exact for integers and what the CPU path has always done.
#pragma once

#include <cstdint>
#include <optional>

#include "transport/base/types.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/topology/topology.h"

namespace hier::transport::hierarchy {

struct ReductionStages {
  Reduction node;                    // the first node step
  ReduceOp network = ReduceOp::Sum;  // every later step
  // What remains after the network step: divide by `divideBy` (AVG), multiply by `multiplyBy`.
  int64_t divideBy = 1;
  std::optional<double> multiplyBy;

  // Applies what remains to `data` (host memory), in place.
  void finish(const Buffer& data) const;
};

ReductionStages reductionStages(ReduceOp op, std::optional<double> premultiply, int groupSize,
                                bool nodeScalesContributions);

// Whether every node of `topology` scales contributions of `dtype` (NodeSteps::scalesContributions):
// the stages then scale in the node step on every rank, else on none. A node that decided alone could
// differ from another (NCCL scales on one rank only from 2.29.7): one node would pre-scale and the other
// divide at the end, and every rank's result would be wrong.
bool everyNodeScales(const NodeSteps& node, const Topology& topology, DataType dtype);

// The stages of a schedule over `topology`'s ranks, its node steps `node`: the scaling decided for all.
ReductionStages reductionStages(ReduceOp op, std::optional<double> premultiply, const Topology& topology,
                                const NodeSteps& node, DataType dtype);

}  // namespace hier::transport::hierarchy
