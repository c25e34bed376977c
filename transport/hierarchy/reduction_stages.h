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

}  // namespace hier::transport::hierarchy
