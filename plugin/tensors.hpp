// From tensors to the transport's buffer views, and the checks that come with it.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "transport/base/types.h"

namespace hier {

// torch's Python name of `dtype` ("float32"), as work tables and agreements show it. Made once per dtype:
// every operation names its dtype.
const char* pythonDtypeName(at::ScalarType dtype);

// The transport's element type for reducing `dtype`, or nothing when the kernels cannot reduce it.
std::optional<transport::DataType> reductionType(at::ScalarType dtype);

// A c10d reduce op as the transport runs it: the op, and for PREMUL_SUM (a SUM of premultiplied inputs)
// the factor: a number, or a tensor on a CUDA device, left there (reading it would make the host wait for
// the device, and break a graph capture). Calls `reject`, which throws, for an op it does not know or a
// PREMUL_SUM without its factor.
struct TransportReduceOp {
  transport::ReduceOp op;
  std::optional<double> premultiply;
  at::Tensor deviceFactor;
};
TransportReduceOp transportReduceOp(const c10d::ReduceOp& reduceOp,
                                    const std::function<void(const std::string&)>& reject);

// A view of a contiguous CPU tensor's elements, typed for reduction.
transport::Buffer typedView(const at::Tensor& tensor, transport::DataType dtype);
// A view of a contiguous CPU tensor's bytes, for collectives that only move data (any dtype).
transport::Buffer byteView(const at::Tensor& tensor);
// Bytes [offset, offset + length) of a contiguous tensor's storage, as bytes.
transport::Buffer byteView(const at::Tensor& tensor, size_t offset, size_t length);

// The tensor to hand the transport in place of `tensor`, which the collective writes: `tensor` itself
// when it is contiguous, otherwise a contiguous copy that finish() copies back.
class Staged {
 public:
  // `copyIn`: the collective reads the old contents too (allreduce, broadcast's root).
  Staged(const at::Tensor& tensor, bool copyIn);
  const at::Tensor& contiguous() const { return work_; }
  // Copies the result back into the caller's tensor when a copy was made.
  void finish() const;

 private:
  at::Tensor original_;
  at::Tensor work_;
};

}  // namespace hier
