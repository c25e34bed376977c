// The bodies of the collectives on host tensors: what runs on the group's executor once a call was
// validated (ProcessGroupHier validates each call once, then routes it by device). The CPU path runs
// them on the caller's tensors; the CUDA path's staged road runs them on pinned host copies of its own.
//
// Each function is called on the caller's thread, with tensors that passed validation: it takes what it
// must at issue time (contiguous copies of inputs, premultiplied inputs) and returns the body the
// executor runs, which lowers the tensors to transport buffers and runs the transport collectives.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plugin/group_core.hpp"
#include "plugin/operation.hpp"
#include "transport/base/types.h"
#include "transport/group/collective.h"

namespace hier::host {

// A reduction as the transport runs it: the op, the element type, and PREMUL_SUM's factor, which the
// host applies to the inputs before summing.
struct Reduction {
  transport::ReduceOp op;
  transport::DataType dtype;
  std::optional<double> premultiply;
  // PREMUL_SUM's factor left on the device (TransportReduceOp), for CUDA tensors only; `premultiply`
  // is then unset until a road that needs it on the host reads it (CudaPath).
  at::Tensor deviceFactor;

  bool premultiplies() const { return premultiply.has_value() || deviceFactor.defined(); }

  // `into` = `from` times the factor, when there is one. `into` may be `from`.
  void premultiplyInto(const at::Tensor& into, const at::Tensor& from) const;
};

Body allreduce(const at::Tensor& tensor, const Reduction& reduction);
// A sparse COO tensor summed over the ranks, as Gloo does it: every rank's coalesced indices and values
// gathered (padded to the largest count), added up and coalesced, then copied into `tensor`.
Body allreduceSparse(const at::Tensor& tensor);
// One transport allreduce per dtype, through one flat buffer each.
Body allreduceCoalesced(const std::vector<at::Tensor>& tensors, const std::vector<Reduction>& reductions);
Body broadcast(const at::Tensor& tensor, int root, bool isRoot);
// Only the root's tensor changes.
Body reduce(const at::Tensor& tensor, const Reduction& reduction, int root, bool isRoot);
// outputs[r] receives rank r's input (sizes may differ by rank).
Body allgather(const at::Tensor& input, const std::vector<at::Tensor>& outputs);
// `output` holds `parts` equal pieces, rank after rank.
Body allgatherIntoTensor(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs, int parts);
// outputs[r][i] receives rank r's inputs[i]: every input packed into one buffer at issue, one allgather of
// those buffers, then each rank's parts copied out (torch's deprecated all_gather_coalesced, as Gloo has it).
Body allgatherCoalesced(const std::vector<at::Tensor>& inputs, const std::vector<std::vector<at::Tensor>>& outputs);
// `outputs` only on the root.
Body gather(const at::Tensor& input, const std::vector<at::Tensor>& outputs, int root);
// `inputs` only on the root.
Body scatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output, int root);
// inputs[r] is this rank's contribution to rank r's output.
Body reduceScatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output, const Reduction& reduction);
// inputs[i] holds `parts` equal pieces, one per rank, of outputs[i]'s size.
Body reduceScatterTensor(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                         const std::vector<Reduction>& reductions, int parts);
// Rows of dimension 0: inRows[p] go to rank p, outRows[p] come from it.
Body alltoallSingle(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& inRows,
                    const std::vector<int64_t>& outRows);
Body alltoall(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs);
Body barrier();

}  // namespace hier::host
