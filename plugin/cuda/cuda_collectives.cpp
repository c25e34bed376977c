// CudaPath's operations: on one node each becomes a NCCL call on the right stream; on several nodes, and
// for point-to-point, the group's CPU operation runs on pinned host copies (see cuda_path.hpp).
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/view_as_real.h>

#include "plugin/cuda/cuda_path.hpp"
#include "plugin/process_group_hier.hpp"
#include "plugin/tensors.hpp"

namespace hier {
namespace {

using transport::DataType;

struct NcclReduction {
  DataType dtype;
  transport::ReduceOp op;
  std::optional<double> premultiply;
};

bool isComplex(const at::Tensor& t) { return at::isComplexType(t.scalar_type()); }

// Complex tensors go to NCCL as pairs of reals (SUM, AVG and PREMUL_SUM only, as in torch).
at::Tensor asNcclTensor(const at::Tensor& t) { return isComplex(t) ? at::view_as_real(t) : t; }

size_t bytesOf(const at::Tensor& t) { return size_t(t.numel()) * t.element_size(); }

}  // namespace

void CudaPath::checkForNccl(const char* op, const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (!t.is_contiguous()) {
      group_.invalid(op, "CUDA tensors must be contiguous here; pass tensor.contiguous() and copy the result back");
    }
    if (t.device() != tensors.front().device()) {
      group_.invalid(op, "all tensors must be on one device; found " + t.device().str() + " and " +
                             tensors.front().device().str());
    }
  }
}

namespace {

NcclReduction ncclReduction(const c10d::ReduceOp& reduceOp, const at::Tensor& tensor,
                            const std::function<void(const std::string&)>& reject) {
  at::Tensor t = asNcclTensor(tensor);
  auto dtype = reductionType(t.scalar_type());
  if (!dtype) reject("cannot reduce " + std::string(c10::toString(tensor.scalar_type())) + " tensors");
  auto [op, premultiply] = transportReduceOp(reduceOp, reject);
  NcclReduction r{*dtype, op, premultiply};
  if (isComplex(tensor) && r.op != transport::ReduceOp::Sum && r.op != transport::ReduceOp::Avg) {
    reject(std::string(toString(r.op)) + " is not defined on complex tensors for NCCL; use SUM or AVG");
  }
  if (!r.premultiply) {
    auto mapped = transport::nccl::reduction(r.op, r.dtype);
    if (!mapped.op) reject(mapped.unsupported);
  }
  return r;
}

// A reduction NCCL can do inside the node for the schedules across nodes (contiguous; an op and dtype
// NCCL reduces; PREMUL_SUM on floating point, applied after the sum): its NCCL view. Anything else stays
// on the staged host path, which reduces every dtype and op.
std::optional<NcclReduction> nodeReduction(const at::Tensor& t, const c10d::ReduceOp& reduceOp) {
  struct Unsupported {};
  if (!t.is_contiguous()) return std::nullopt;
  try {
    auto r = ncclReduction(reduceOp, t, [](const std::string&) { throw Unsupported{}; });
    if (r.premultiply && !at::isFloatingType(t.scalar_type()) && !isComplex(t)) return std::nullopt;
    return r;
  } catch (const Unsupported&) {
    return std::nullopt;
  }
}

template <typename Options>
Options hostOptions(const Options& opts) {
  Options host = opts;
  host.asyncOp = true;  // queued behind the staging gate on the group's executor, never run on the caller
  return host;
}

}  // namespace

#define HIER_REJECT(op) [&](const std::string& why) { group_.invalid(op, why); }

c10::intrusive_ptr<c10d::Work> CudaPath::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  if (tensors.size() != 1) group_.invalid(op, "expects exactly one tensor, got " + std::to_string(tensors.size()));
  if (!oneNode()) {
    const at::Tensor& t = tensors[0];
    auto r = nodeReduction(t, opts.reduceOp);
    at::Tensor n = asNcclTensor(t);
    if (r && transport::hierarchy::planAllreduce(topology(), bytesOf(t), size_t(n.numel())) ==
                 transport::hierarchy::Schedule::SplitRail) {
      transport::nccl::DeviceAllreduce how{n.data_ptr(), size_t(n.numel()), r->dtype, r->op, r->premultiply};
      const size_t pinned = transport::nccl::splitRailPinnedBytes(how.count, how.dtype, topology().localSize());
      return acrossNodes(c10d::OpType::ALLREDUCE, op, t, t, opts.timeout, opts.asyncOp, pinned, 0,
                         [how](auto& c, auto& node, cudaStream_t stream, void* pinned, void*) {
                           transport::nccl::allreduceSplitRail(c, node, how, stream, pinned);
                         });
    }
    return staged(c10d::OpType::ALLREDUCE, op, tensors, tensors, /*inPlace=*/true,
                  [this, opts](auto& in, auto&) { return group_.allreduce(in, hostOptions(opts)); });
  }
  checkForNccl(op, tensors);
  at::Tensor t = tensors[0];
  auto r = ncclReduction(opts.reduceOp, t, HIER_REJECT(op));
  return onNccl(c10d::OpType::ALLREDUCE, op, {t}, {t}, opts.timeout, opts.asyncOp,
                [t, r](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  at::Tensor n = asNcclTensor(t);
                  nccl.allreduce(n.data_ptr(), n.data_ptr(), size_t(n.numel()), r.dtype, r.op, stream, r.premultiply);
                });
}

c10::intrusive_ptr<c10d::Work> CudaPath::allreduceCoalesced(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  if (!oneNode()) {
    return staged(c10d::OpType::ALLREDUCE_COALESCED, op, tensors, tensors, true,
                  [this, opts](auto& in, auto&) { return group_.allreduce_coalesced(in, hostOptions(opts)); });
  }
  checkForNccl(op, tensors);
  std::vector<NcclReduction> rs;
  for (auto& t : tensors) rs.push_back(ncclReduction(opts.reduceOp, t, HIER_REJECT(op)));
  return onNccl(c10d::OpType::ALLREDUCE_COALESCED, op, tensors, tensors, opts.timeout, opts.asyncOp,
                [tensors, rs](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  for (size_t i = 0; i < tensors.size(); ++i) {
                    at::Tensor n = asNcclTensor(tensors[i]);
                    nccl.allreduce(n.data_ptr(), n.data_ptr(), size_t(n.numel()), rs[i].dtype, rs[i].op, stream,
                                   rs[i].premultiply);
                  }
                });
}

c10::intrusive_ptr<c10d::Work> CudaPath::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  if (tensors.size() != 1) group_.invalid(op, "expects exactly one tensor, got " + std::to_string(tensors.size()));
  if (opts.rootRank < 0 || opts.rootRank >= group_.getSize()) group_.invalid(op, "root rank " + std::to_string(opts.rootRank) + " is outside the group");
  if (!oneNode()) {
    return staged(c10d::OpType::BROADCAST, op, tensors, tensors, true,
                  [this, opts](auto& in, auto&) { return group_.broadcast(in, hostOptions(opts)); });
  }
  checkForNccl(op, tensors);
  at::Tensor t = tensors[0];
  const int root = int(opts.rootRank);
  return onNccl(c10d::OpType::BROADCAST, op, {t}, {t}, opts.timeout, opts.asyncOp,
                [t, root](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  nccl.broadcast(t.data_ptr(), bytesOf(t), DataType::UInt8, root, stream);
                });
}

c10::intrusive_ptr<c10d::Work> CudaPath::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  if (tensors.size() != 1) group_.invalid(op, "expects exactly one tensor, got " + std::to_string(tensors.size()));
  if (opts.rootRank < 0 || opts.rootRank >= group_.getSize()) group_.invalid(op, "root rank " + std::to_string(opts.rootRank) + " is outside the group");
  if (!oneNode()) {
    return staged(c10d::OpType::REDUCE, op, tensors, tensors, true,
                  [this, opts](auto& in, auto&) { return group_.reduce(in, hostOptions(opts)); });
  }
  checkForNccl(op, tensors);
  at::Tensor t = tensors[0];
  auto r = ncclReduction(opts.reduceOp, t, HIER_REJECT(op));
  if (r.premultiply) group_.invalid(op, "PREMUL_SUM is supported by allreduce and reduce_scatter on CUDA tensors");
  const int root = int(opts.rootRank);
  return onNccl(c10d::OpType::REDUCE, op, {t}, {t}, opts.timeout, opts.asyncOp,
                [t, r, root](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  at::Tensor n = asNcclTensor(t);
                  nccl.reduce(n.data_ptr(), n.data_ptr(), size_t(n.numel()), r.dtype, r.op, root, stream);
                });
}

c10::intrusive_ptr<c10d::Work> CudaPath::allgatherBase(at::Tensor& output, at::Tensor& input,
                                                       const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  if (output.numel() != input.numel() * group_.getSize() || output.scalar_type() != input.scalar_type()) {
    group_.invalid(op, "the output must hold group size x input elements of the input's dtype");
  }
  if (!oneNode()) {
    if (input.is_contiguous() && output.is_contiguous() && input.device() == output.device() &&
        transport::hierarchy::planAllgather(topology()) == transport::hierarchy::Schedule::Rails) {
      // Bytes: every dtype moves alike.
      transport::nccl::DeviceAllgather how{input.data_ptr(), output.data_ptr(), bytesOf(input), DataType::UInt8};
      return acrossNodes(c10d::OpType::_ALLGATHER_BASE, op, input, output, opts.timeout, opts.asyncOp,
                         transport::nccl::allgatherRailsPinnedBytes(how, topology()), 0,
                         [how](auto& c, auto& node, cudaStream_t stream, void* pinned, void*) {
                           transport::nccl::allgatherRails(c, node, how, stream, pinned);
                         });
    }
    return staged(c10d::OpType::_ALLGATHER_BASE, op, {input}, {output}, false, [this, opts](auto& in, auto& out) {
      return group_._allgather_base(out[0], in[0], hostOptions(opts));
    });
  }
  checkForNccl(op, {input, output});
  return onNccl(c10d::OpType::_ALLGATHER_BASE, op, {input}, {output}, opts.timeout, opts.asyncOp,
                [input, output](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  nccl.allGather(input.data_ptr(), output.data_ptr(), bytesOf(input), DataType::UInt8, stream);
                });
}

c10::intrusive_ptr<c10d::Work> CudaPath::allgatherCoalesced(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor_coalesced";
  if (outputs.size() != inputs.size()) group_.invalid(op, "needs one output per input");
  if (!oneNode()) {
    return staged(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, op, inputs, outputs, false,
                  [this, opts](auto& in, auto& out) { return group_.allgather_into_tensor_coalesced(out, in, hostOptions(opts)); });
  }
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  checkForNccl(op, all);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (outputs[i].numel() != inputs[i].numel() * group_.getSize()) group_.invalid(op, "output " + std::to_string(i) + " must hold group size x input elements");
  }
  return onNccl(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, op, inputs, outputs, opts.timeout, opts.asyncOp,
                [inputs, outputs](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  for (size_t i = 0; i < inputs.size(); ++i) {
                    nccl.allGather(inputs[i].data_ptr(), outputs[i].data_ptr(), bytesOf(inputs[i]), DataType::UInt8, stream);
                  }
                });
}

c10::intrusive_ptr<c10d::Work> CudaPath::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  if (inputs.size() != 1 || outputs.size() != 1 || outputs[0].size() != size_t(group_.getSize())) {
    group_.invalid(op, "expects one input tensor and one list of one output per rank");
  }
  // Through one flat buffer: NCCL gathers equal parts.
  for (auto& o : outputs[0]) {
    if (o.numel() != inputs[0].numel()) group_.invalid(op, "CUDA allgather needs outputs of the input's size");
  }
  std::vector<at::Tensor> outs = outputs[0];
  return staged(c10d::OpType::ALLGATHER, op, inputs, outs, false, [this, opts](auto& in, auto& out) {
    std::vector<std::vector<at::Tensor>> lists{out};
    return group_.allgather(lists, in, hostOptions(opts));
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> outs = outputs.empty() ? std::vector<at::Tensor>{} : outputs[0];
  return staged(c10d::OpType::GATHER, "gather", inputs, outs, false, [this, opts](auto& in, auto& out) {
    std::vector<std::vector<at::Tensor>> lists;
    if (!out.empty()) lists.push_back(out);
    return group_.gather(lists, in, hostOptions(opts));
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::scatter(std::vector<at::Tensor>& outputs,
                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                 const c10d::ScatterOptions& opts) {
  std::vector<at::Tensor> ins = inputs.empty() ? std::vector<at::Tensor>{} : inputs[0];
  return staged(c10d::OpType::SCATTER, "scatter", ins, outputs, false, [this, opts](auto& in, auto& out) {
    std::vector<std::vector<at::Tensor>> lists;
    if (!in.empty()) lists.push_back(in);
    return group_.scatter(out, lists, hostOptions(opts));
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::reduceScatterBase(at::Tensor& output, at::Tensor& input,
                                                           const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  if (input.numel() != output.numel() * group_.getSize() || output.scalar_type() != input.scalar_type()) {
    group_.invalid(op, "the input must hold group size x output elements of the output's dtype");
  }
  if (!oneNode()) {
    auto r = nodeReduction(output, opts.reduceOp);
    if (r && input.is_contiguous() && input.device() == output.device() &&
        transport::hierarchy::planAllgather(topology()) == transport::hierarchy::Schedule::Rails) {
      at::Tensor in = asNcclTensor(input), out = asNcclTensor(output);
      transport::nccl::DeviceReduceScatter how{in.data_ptr(), out.data_ptr(), size_t(out.numel()), r->dtype, r->op,
                                               r->premultiply};
      return acrossNodes(c10d::OpType::_REDUCE_SCATTER_BASE, op, input, output, opts.timeout, opts.asyncOp,
                         transport::nccl::reduceScatterRailsPinnedBytes(how, topology()),
                         transport::nccl::reduceScatterRailsDeviceBytes(how, topology()),
                         [how](auto& c, auto& node, cudaStream_t stream, void* pinned, void* scratch) {
                           transport::nccl::reduceScatterRails(c, node, how, stream, pinned, scratch);
                         });
    }
    return staged(c10d::OpType::_REDUCE_SCATTER_BASE, op, {input}, {output}, false, [this, opts](auto& in, auto& out) {
      return group_._reduce_scatter_base(out[0], in[0], hostOptions(opts));
    });
  }
  checkForNccl(op, {input, output});
  auto r = ncclReduction(opts.reduceOp, output, HIER_REJECT(op));
  return onNccl(c10d::OpType::_REDUCE_SCATTER_BASE, op, {input}, {output}, opts.timeout, opts.asyncOp,
                [input, output, r](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  at::Tensor in = asNcclTensor(input), out = asNcclTensor(output);
                  nccl.reduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()), r.dtype, r.op, stream,
                                     r.premultiply);
                });
}

c10::intrusive_ptr<c10d::Work> CudaPath::reduceScatterCoalesced(std::vector<at::Tensor>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  if (outputs.size() != inputs.size()) group_.invalid(op, "needs one output per input");
  if (!oneNode()) {
    return staged(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, op, inputs, outputs, false,
                  [this, opts](auto& in, auto& out) { return group_.reduce_scatter_tensor_coalesced(out, in, hostOptions(opts)); });
  }
  std::vector<NcclReduction> rs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkForNccl(op, {inputs[i], outputs[i]});
    if (inputs[i].numel() != outputs[i].numel() * group_.getSize()) group_.invalid(op, "input " + std::to_string(i) + " must hold group size x output elements");
    rs.push_back(ncclReduction(opts.reduceOp, outputs[i], HIER_REJECT(op)));
  }
  return onNccl(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, op, inputs, outputs, opts.timeout, opts.asyncOp,
                [inputs, outputs, rs](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  for (size_t i = 0; i < inputs.size(); ++i) {
                    at::Tensor in = asNcclTensor(inputs[i]), out = asNcclTensor(outputs[i]);
                    nccl.reduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()), rs[i].dtype, rs[i].op,
                                       stream, rs[i].premultiply);
                  }
                });
}

c10::intrusive_ptr<c10d::Work> CudaPath::reduceScatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> ins = inputs.empty() ? std::vector<at::Tensor>{} : inputs[0];
  return staged(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", ins, outputs, false, [this, opts](auto& in, auto& out) {
    std::vector<std::vector<at::Tensor>> lists{in};
    return group_.reduce_scatter(out, lists, hostOptions(opts));
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::alltoallBase(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& outputSplits,
                                                      std::vector<int64_t>& inputSplits,
                                                      const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all_single";
  const int n = group_.getSize();
  if (!oneNode() || input.dim() == 0) {
    return staged(c10d::OpType::ALLTOALL_BASE, op, {input}, {output}, false,
                  [this, opts, outputSplits, inputSplits](auto& in, auto& out) mutable {
                    return group_.alltoall_base(out[0], in[0], outputSplits, inputSplits, hostOptions(opts));
                  });
  }
  checkForNccl(op, {input, output});
  auto offsets = [&](const std::vector<int64_t>& splits, const at::Tensor& t, std::vector<size_t>& sizes,
                     std::vector<size_t>& starts) {
    const size_t row = t.size(0) ? bytesOf(t) / size_t(t.size(0)) : 0;
    size_t at = 0;
    for (int p = 0; p < n; ++p) {
      size_t rows = splits.empty() ? size_t(t.size(0) / n) : size_t(splits[size_t(p)]);
      starts.push_back(at);
      sizes.push_back(rows * row);
      at += rows * row;
    }
    if (at != bytesOf(t)) group_.invalid(op, "the split sizes do not add up to dimension 0 of the tensor");
  };
  std::vector<size_t> sendSizes, sendStarts, recvSizes, recvStarts;
  offsets(inputSplits, input, sendSizes, sendStarts);
  offsets(outputSplits, output, recvSizes, recvStarts);
  return onNccl(c10d::OpType::ALLTOALL_BASE, op, {input}, {output}, opts.timeout, opts.asyncOp,
                [=](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  nccl.exchange(input.data_ptr(), sendStarts, sendSizes, output.data_ptr(), recvStarts, recvSizes, stream);
                });
}

c10::intrusive_ptr<c10d::Work> CudaPath::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                  const c10d::AllToAllOptions& opts) {
  return staged(c10d::OpType::ALLTOALL, "all_to_all", inputs, outputs, false, [this, opts](auto& in, auto& out) {
    return group_.alltoall(out, in, hostOptions(opts));
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  return staged(c10d::OpType::SEND, "send", tensors, {}, false,
                [this, dstRank, tag](auto& in, auto&) { return group_.send(in, dstRank, tag); });
}

c10::intrusive_ptr<c10d::Work> CudaPath::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return staged(c10d::OpType::RECV, "recv", tensors, tensors, true,
                [this, srcRank, tag](auto& in, auto&) { return group_.recv(in, srcRank, tag); });
}

c10::intrusive_ptr<c10d::Work> CudaPath::barrier(const c10d::BarrierOptions& opts) {
  // A one-element allreduce on the device, waited for by the host (barrier's meaning).
  int index = opts.device ? opts.device->index() : (opts.device_ids.empty() ? 0 : int(opts.device_ids[0]));
  at::Tensor token = at::empty({1}, at::TensorOptions().device(c10::Device(c10::kCUDA, c10::DeviceIndex(index))));
  if (!oneNode()) {
    return group_.barrier(opts);
  }
  return onNccl(c10d::OpType::BARRIER, "barrier", {token}, {token}, opts.timeout, true,
                [token](cudaStream_t stream, transport::nccl::Communicator& nccl) {
                  nccl.allreduce(token.data_ptr(), token.data_ptr(), 1, DataType::Float32, transport::ReduceOp::Sum, stream);
                });
}

}  // namespace hier
