// ProcessGroupHier's collectives: check the arguments on the caller's thread, then queue a body that
// lowers the tensors to transport buffers and runs the transport collective.
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <numeric>

#include "plugin/process_group_hier.hpp"
#include "plugin/tensors.hpp"
#ifdef HIER_WITH_CUDA
#include "plugin/cuda/cuda_path.hpp"
#endif
#include "transport/collectives.h"
#include "transport/reduce.h"

namespace hier {
namespace {

using transport::Buffer;
using transport::DataType;

// A reduction as the transport runs it: the op, the element type and PREMUL_SUM's factor, if any.
struct Reduction {
  transport::ReduceOp op;
  DataType dtype;
  std::optional<double> premultiply;

  // PREMUL_SUM multiplies before summing. `into` may be `from` (in-place collectives).
  void premultiplyInto(const at::Tensor& into, const at::Tensor& from) const {
    if (premultiply) transport::scale(into.data_ptr(), from.data_ptr(), size_t(from.numel()), dtype, *premultiply);
  }
};

std::vector<Buffer> bytesOfEach(const std::vector<at::Tensor>& tensors) {
  std::vector<Buffer> views;
  views.reserve(tensors.size());
  for (auto& t : tensors) views.push_back(byteView(t));
  return views;
}

// `whole` cut into `parts` equal consecutive pieces, as byte views.
std::vector<Buffer> bytePieces(const at::Tensor& whole, int parts) {
  const size_t piece = size_t(whole.numel()) * whole.element_size() / size_t(parts);
  std::vector<Buffer> views;
  for (int p = 0; p < parts; ++p) views.push_back(byteView(whole, size_t(p) * piece, piece));
  return views;
}

std::vector<Buffer> typedPieces(const at::Tensor& whole, int parts, DataType dtype) {
  const size_t piece = size_t(whole.numel()) / size_t(parts);
  std::vector<Buffer> views;
  for (int p = 0; p < parts; ++p) views.push_back(typedView(whole, dtype).slice(size_t(p) * piece, piece));
  return views;
}

std::string dtypeName(const at::Tensor& t) { return std::string(c10::toString(t.scalar_type())); }

}  // namespace

bool anyCuda(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (t.defined() && t.is_cuda()) return true;
  }
  return false;
}
bool anyCuda(const std::vector<std::vector<at::Tensor>>& lists) {
  for (const auto& list : lists) {
    if (anyCuda(list)) return true;
  }
  return false;
}

// CUDA tensors take the CUDA path, in builds that have one (cuda/cuda_path.hpp).
#ifdef HIER_WITH_CUDA
#define HIER_ROUTE_CUDA(onCuda, call) \
  if (onCuda) {                       \
    return cuda()->call;              \
  }
#else
#define HIER_ROUTE_CUDA(onCuda, call)
#endif

// The checks every collective shares. Each throws the convention's error through `invalid`.
#define HIER_REQUIRE(condition, op, ...) \
  do {                                   \
    if (!(condition)) invalid(op, c10::str(__VA_ARGS__)); \
  } while (0)

namespace {

Reduction toReduction(const c10d::ReduceOp& reduceOp, const at::Tensor& tensor,
                      const std::function<void(const std::string&)>& reject) {
  auto dtype = reductionType(tensor.scalar_type());
  if (!dtype) {
    reject("cannot reduce " + dtypeName(tensor) +
           " tensors; reductions support float32/64, float16, bfloat16, int8/16/32/64, uint8, bool and complex64/128");
  }
  auto [op, premultiply] = transportReduceOp(reduceOp, reject);
  if (premultiply && !at::isFloatingType(tensor.scalar_type()) && !at::isComplexType(tensor.scalar_type())) {
    reject("PREMUL_SUM scales by a real factor and needs a floating-point or complex tensor, not " + dtypeName(tensor));
  }
  Reduction reduction{op, *dtype, premultiply};
  if (auto reason = transport::unsupportedReason(reduction.op, reduction.dtype)) reject(*reason);
  return reduction;
}

}  // namespace

// ---- allreduce, broadcast, reduce -----------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(tensors), allreduce(tensors, opts));
  const char* op = "allreduce";
  HIER_REQUIRE(tensors.size() == 1, op, "expects exactly one tensor, got ", tensors.size(),
               "; use allreduce_coalesced for several");
  HIER_REQUIRE(!opts.sparseIndices.has_value(), op, "sparse allreduce is not supported; pass a dense tensor");
  at::Tensor tensor = tensors[0];
  checkTensor(op, tensor);
  Reduction reduction = toReduction(opts.reduceOp, tensor, [&](const std::string& why) { invalid(op, why); });
  Staged staged(tensor, /*copyIn=*/true);
  return enqueue(c10d::OpType::ALLREDUCE, op, {tensor}, {tensor}, opts.timeout, opts.asyncOp,
                 [staged, reduction](Running& running) {
                   const at::Tensor& data = staged.contiguous();
                   reduction.premultiplyInto(data, data);
                   auto c = running.next();
                   transport::allreduce(c, typedView(data, reduction.dtype), reduction.op);
                   staged.finish();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(tensors), allreduceCoalesced(tensors, opts));
  const char* op = "allreduce_coalesced";
  HIER_REQUIRE(!tensors.empty(), op, "got no tensors");
  std::vector<Reduction> reductions;
  for (auto& t : tensors) {
    checkTensor(op, t);
    reductions.push_back(toReduction(opts.reduceOp, t, [&](const std::string& why) { invalid(op, why); }));
  }
  // One flat buffer per dtype, in order of first appearance: one transport allreduce each.
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return tensors[g[0]].scalar_type() == tensors[i].scalar_type(); });
    if (it == groups.end()) groups.push_back({i});
    else it->push_back(i);
  }
  std::vector<at::Tensor> flats;
  for (auto& group : groups) {
    std::vector<at::Tensor> pieces;
    for (size_t i : group) pieces.push_back(tensors[i].reshape({-1}));
    flats.push_back(at::cat(pieces));
  }
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, op, tensors, tensors, opts.timeout, opts.asyncOp,
                 [tensors, groups, flats, reductions](Running& running) {
                   for (size_t g = 0; g < groups.size(); ++g) {
                     const Reduction& reduction = reductions[groups[g][0]];
                     reduction.premultiplyInto(flats[g], flats[g]);
                     auto c = running.next();
                     transport::allreduce(c, typedView(flats[g], reduction.dtype), reduction.op);
                     int64_t offset = 0;
                     for (size_t i : groups[g]) {
                       const int64_t n = tensors[i].numel();
                       tensors[i].copy_(flats[g].narrow(0, offset, n).view(tensors[i].sizes()));
                       offset += n;
                     }
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(tensors), broadcast(tensors, opts));
  const char* op = "broadcast";
  HIER_REQUIRE(tensors.size() == 1, op, "expects exactly one tensor, got ", tensors.size());
  HIER_REQUIRE(opts.rootRank >= 0 && opts.rootRank < size_, op, "root rank ", opts.rootRank,
               " is outside the group's ranks 0..", size_ - 1, "; pass a rank of this group");
  HIER_REQUIRE(opts.rootTensor == 0, op, "root tensor ", opts.rootTensor, " does not exist: there is one tensor");
  at::Tensor tensor = tensors[0];
  checkTensor(op, tensor);
  const int root = int(opts.rootRank);
  Staged staged(tensor, /*copyIn=*/rank_ == root);
  return enqueue(c10d::OpType::BROADCAST, op, {tensor}, {tensor}, opts.timeout, opts.asyncOp,
                 [staged, root](Running& running) {
                   auto c = running.next();
                   transport::broadcast(c, byteView(staged.contiguous()), root);
                   staged.finish();
                 },
                 root);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(tensors), reduce(tensors, opts));
  const char* op = "reduce";
  HIER_REQUIRE(tensors.size() == 1, op, "expects exactly one tensor, got ", tensors.size());
  HIER_REQUIRE(opts.rootRank >= 0 && opts.rootRank < size_, op, "root rank ", opts.rootRank,
               " is outside the group's ranks 0..", size_ - 1, "; pass a rank of this group");
  HIER_REQUIRE(opts.rootTensor == 0, op, "root tensor ", opts.rootTensor, " does not exist: there is one tensor");
  at::Tensor tensor = tensors[0];
  checkTensor(op, tensor);
  Reduction reduction = toReduction(opts.reduceOp, tensor, [&](const std::string& why) { invalid(op, why); });
  const int root = int(opts.rootRank);
  // Only the root's tensor changes. The others read theirs (a copy when it must be premultiplied).
  at::Tensor input = reduction.premultiply ? at::empty_like(tensor, at::MemoryFormat::Contiguous) : tensor.contiguous();
  if (reduction.premultiply) reduction.premultiplyInto(input, tensor.contiguous());
  Staged staged(tensor, /*copyIn=*/false);
  const bool isRoot = rank_ == root;
  return enqueue(c10d::OpType::REDUCE, op, {tensor}, {tensor}, opts.timeout, opts.asyncOp,
                 [staged, input, reduction, root, isRoot](Running& running) {
                   auto c = running.next();
                   Buffer in = typedView(input, reduction.dtype);
                   transport::reduce(c, in, isRoot ? typedView(staged.contiguous(), reduction.dtype) : in,
                                     reduction.op, root);
                   if (isRoot) staged.finish();
                 },
                 root);
}

// ---- allgather and gather ---------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(inputs) || anyCuda(outputs), allgather(outputs, inputs, opts));
  const char* op = "allgather";
  HIER_REQUIRE(inputs.size() == 1 && outputs.size() == 1, op,
               "expects one input tensor and one list of outputs, got ", inputs.size(), " and ", outputs.size());
  HIER_REQUIRE(outputs[0].size() == size_t(size_), op, "needs one output tensor per rank (", size_, "), got ",
               outputs[0].size());
  at::Tensor input = inputs[0];
  checkTensor(op, input);
  for (auto& out : outputs[0]) {
    checkTensor(op, out);
    HIER_REQUIRE(out.scalar_type() == input.scalar_type(), op, "output dtype ", dtypeName(out),
                 " differs from the input's ", dtypeName(input), "; all tensors must share one dtype");
  }
  HIER_REQUIRE(outputs[0][size_t(rank_)].numel() == input.numel(), op, "this rank's output has ",
               outputs[0][size_t(rank_)].numel(), " elements but the input has ", input.numel());
  std::vector<Staged> staged;
  for (auto& out : outputs[0]) staged.emplace_back(out, /*copyIn=*/false);
  at::Tensor in = input.contiguous();
  return enqueue(c10d::OpType::ALLGATHER, op, {input}, outputs[0], opts.timeout, opts.asyncOp,
                 [staged, in](Running& running) {
                   std::vector<at::Tensor> targets;
                   for (auto& s : staged) targets.push_back(s.contiguous());
                   auto c = running.next();
                   transport::allgather(c, byteView(in), bytesOfEach(targets));
                   for (auto& s : staged) s.finish();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  HIER_ROUTE_CUDA(input.is_cuda() || output.is_cuda(), allgatherBase(output, input, opts));
  const char* op = "all_gather_into_tensor";
  checkTensor(op, input);
  checkTensor(op, output);
  HIER_REQUIRE(output.scalar_type() == input.scalar_type(), op, "output dtype ", dtypeName(output),
               " differs from the input's ", dtypeName(input));
  HIER_REQUIRE(output.numel() == input.numel() * size_, op, "the output must hold group size (", size_,
               ") x input elements = ", input.numel() * size_, ", but has ", output.numel());
  Staged staged(output, /*copyIn=*/false);
  at::Tensor in = input.contiguous();
  const int n = size_;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, op, {input}, {output}, opts.timeout, opts.asyncOp,
                 [staged, in, n](Running& running) {
                   auto c = running.next();
                   transport::allgather(c, byteView(in), bytePieces(staged.contiguous(), n));
                   staged.finish();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(inputs) || anyCuda(outputs), allgatherCoalesced(outputs, inputs, opts));
  const char* op = "allgather_into_tensor_coalesced";
  HIER_REQUIRE(outputs.size() == inputs.size() && !inputs.empty(), op, "needs one output per input, got ",
               outputs.size(), " outputs for ", inputs.size(), " inputs");
  std::vector<Staged> staged;
  std::vector<at::Tensor> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(op, inputs[i]);
    checkTensor(op, outputs[i]);
    HIER_REQUIRE(outputs[i].scalar_type() == inputs[i].scalar_type(), op, "output ", i, " has dtype ",
                 dtypeName(outputs[i]), " but its input has ", dtypeName(inputs[i]));
    HIER_REQUIRE(outputs[i].numel() == inputs[i].numel() * size_, op, "output ", i, " must hold ",
                 inputs[i].numel() * size_, " elements, but has ", outputs[i].numel());
    staged.emplace_back(outputs[i], /*copyIn=*/false);
    ins.push_back(inputs[i].contiguous());
  }
  const int n = size_;
  return enqueue(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, op, inputs, outputs, opts.timeout, opts.asyncOp,
                 [staged, ins, n](Running& running) {
                   for (size_t i = 0; i < ins.size(); ++i) {
                     auto c = running.next();
                     transport::allgather(c, byteView(ins[i]), bytePieces(staged[i].contiguous(), n));
                     staged[i].finish();
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(inputs) || anyCuda(outputs), gather(outputs, inputs, opts));
  const char* op = "gather";
  HIER_REQUIRE(inputs.size() == 1, op, "expects exactly one input tensor, got ", inputs.size());
  HIER_REQUIRE(opts.rootRank >= 0 && opts.rootRank < size_, op, "root rank ", opts.rootRank,
               " is outside the group's ranks 0..", size_ - 1, "; pass a rank of this group");
  const int root = int(opts.rootRank);
  at::Tensor input = inputs[0];
  checkTensor(op, input);
  std::vector<Staged> staged;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    HIER_REQUIRE(outputs.size() == 1 && outputs[0].size() == size_t(size_), op,
                 "the root needs one list of one output tensor per rank (", size_, ")");
    for (auto& out : outputs[0]) {
      checkTensor(op, out);
      HIER_REQUIRE(out.scalar_type() == input.scalar_type() && out.numel() == input.numel(), op,
                   "every output must match the input's dtype and size (", dtypeName(input), ", ", input.numel(),
                   " elements); got ", dtypeName(out), ", ", out.numel());
      staged.emplace_back(out, /*copyIn=*/false);
      outs.push_back(out);
    }
  } else {
    HIER_REQUIRE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), op,
                 "only the root (rank ", root, ") passes output tensors");
  }
  at::Tensor in = input.contiguous();
  return enqueue(c10d::OpType::GATHER, op, {input}, outs, opts.timeout, opts.asyncOp,
                 [staged, in, root](Running& running) {
                   std::vector<at::Tensor> targets;
                   for (auto& s : staged) targets.push_back(s.contiguous());
                   auto c = running.next();
                   transport::gather(c, byteView(in), bytesOfEach(targets), root);
                   for (auto& s : staged) s.finish();
                 },
                 root);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(inputs) || anyCuda(outputs), scatter(outputs, inputs, opts));
  const char* op = "scatter";
  HIER_REQUIRE(outputs.size() == 1, op, "expects exactly one output tensor, got ", outputs.size());
  HIER_REQUIRE(opts.rootRank >= 0 && opts.rootRank < size_, op, "root rank ", opts.rootRank,
               " is outside the group's ranks 0..", size_ - 1, "; pass a rank of this group");
  const int root = int(opts.rootRank);
  at::Tensor output = outputs[0];
  checkTensor(op, output);
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    HIER_REQUIRE(inputs.size() == 1 && inputs[0].size() == size_t(size_), op,
                 "the root needs one list of one input tensor per rank (", size_, ")");
    for (auto& in : inputs[0]) {
      checkTensor(op, in);
      HIER_REQUIRE(in.scalar_type() == output.scalar_type() && in.numel() == output.numel(), op,
                   "every input must match the output's dtype and size (", dtypeName(output), ", ", output.numel(),
                   " elements); got ", dtypeName(in), ", ", in.numel());
      ins.push_back(in.contiguous());
    }
  } else {
    HIER_REQUIRE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), op,
                 "only the root (rank ", root, ") passes input tensors");
  }
  Staged staged(output, /*copyIn=*/false);
  return enqueue(c10d::OpType::SCATTER, op, ins, {output}, opts.timeout, opts.asyncOp,
                 [staged, ins, root](Running& running) {
                   auto c = running.next();
                   transport::scatter(c, bytesOfEach(ins), byteView(staged.contiguous()), root);
                   staged.finish();
                 },
                 root);
}

// ---- reduce_scatter ---------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(inputs) || anyCuda(outputs), reduceScatter(outputs, inputs, opts));
  const char* op = "reduce_scatter";
  HIER_REQUIRE(outputs.size() == 1 && inputs.size() == 1, op,
               "expects one output tensor and one list of inputs, got ", outputs.size(), " and ", inputs.size());
  HIER_REQUIRE(inputs[0].size() == size_t(size_), op, "needs one input tensor per rank (", size_, "), got ",
               inputs[0].size());
  at::Tensor output = outputs[0];
  checkTensor(op, output);
  Reduction reduction = toReduction(opts.reduceOp, output, [&](const std::string& why) { invalid(op, why); });
  std::vector<at::Tensor> ins;
  for (auto& in : inputs[0]) {
    checkTensor(op, in);
    HIER_REQUIRE(in.scalar_type() == output.scalar_type(), op, "input dtype ", dtypeName(in),
                 " differs from the output's ", dtypeName(output), "; all tensors must share one dtype");
    at::Tensor copy = in.contiguous();
    if (reduction.premultiply) {
      at::Tensor scaled = at::empty_like(copy);
      reduction.premultiplyInto(scaled, copy);
      copy = scaled;
    }
    ins.push_back(copy);
  }
  HIER_REQUIRE(ins[size_t(rank_)].numel() == output.numel(), op, "the input for this rank has ",
               ins[size_t(rank_)].numel(), " elements but the output has ", output.numel());
  Staged staged(output, /*copyIn=*/false);
  return enqueue(c10d::OpType::REDUCE_SCATTER, op, inputs[0], {output}, opts.timeout, opts.asyncOp,
                 [staged, ins, reduction](Running& running) {
                   std::vector<Buffer> views;
                   for (auto& in : ins) views.push_back(typedView(in, reduction.dtype));
                   auto c = running.next();
                   transport::reduceScatter(c, views, typedView(staged.contiguous(), reduction.dtype), reduction.op);
                   staged.finish();
                 });
}

namespace {
// The input a single-tensor reduce_scatter reads: contiguous, premultiplied when PREMUL_SUM asks.
at::Tensor reduceScatterInput(const at::Tensor& input, const Reduction& reduction) {
  at::Tensor in = input.contiguous();
  if (!reduction.premultiply) return in;
  at::Tensor scaled = at::empty_like(in);
  reduction.premultiplyInto(scaled, in);
  return scaled;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  HIER_ROUTE_CUDA(input.is_cuda() || output.is_cuda(), reduceScatterBase(output, input, opts));
  const char* op = "reduce_scatter_tensor";
  checkTensor(op, input);
  checkTensor(op, output);
  HIER_REQUIRE(output.scalar_type() == input.scalar_type(), op, "output dtype ", dtypeName(output),
               " differs from the input's ", dtypeName(input));
  HIER_REQUIRE(input.numel() == output.numel() * size_, op, "the input must hold group size (", size_,
               ") x output elements = ", output.numel() * size_, ", but has ", input.numel());
  Reduction reduction = toReduction(opts.reduceOp, output, [&](const std::string& why) { invalid(op, why); });
  at::Tensor in = reduceScatterInput(input, reduction);
  Staged staged(output, /*copyIn=*/false);
  const int n = size_;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, op, {input}, {output}, opts.timeout, opts.asyncOp,
                 [staged, in, reduction, n](Running& running) {
                   auto c = running.next();
                   transport::reduceScatter(c, typedPieces(in, n, reduction.dtype),
                                            typedView(staged.contiguous(), reduction.dtype), reduction.op);
                   staged.finish();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(inputs) || anyCuda(outputs), reduceScatterCoalesced(outputs, inputs, opts));
  const char* op = "reduce_scatter_tensor_coalesced";
  HIER_REQUIRE(outputs.size() == inputs.size() && !inputs.empty(), op, "needs one output per input, got ",
               outputs.size(), " outputs for ", inputs.size(), " inputs");
  std::vector<Staged> staged;
  std::vector<at::Tensor> ins;
  std::vector<Reduction> reductions;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(op, inputs[i]);
    checkTensor(op, outputs[i]);
    HIER_REQUIRE(outputs[i].scalar_type() == inputs[i].scalar_type(), op, "output ", i, " has dtype ",
                 dtypeName(outputs[i]), " but its input has ", dtypeName(inputs[i]));
    HIER_REQUIRE(inputs[i].numel() == outputs[i].numel() * size_, op, "input ", i, " must hold ",
                 outputs[i].numel() * size_, " elements, but has ", inputs[i].numel());
    reductions.push_back(toReduction(opts.reduceOp, outputs[i], [&](const std::string& why) { invalid(op, why); }));
    ins.push_back(reduceScatterInput(inputs[i], reductions.back()));
    staged.emplace_back(outputs[i], /*copyIn=*/false);
  }
  const int n = size_;
  return enqueue(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, op, inputs, outputs, opts.timeout, opts.asyncOp,
                 [staged, ins, reductions, n](Running& running) {
                   for (size_t i = 0; i < ins.size(); ++i) {
                     auto c = running.next();
                     transport::reduceScatter(c, typedPieces(ins[i], n, reductions[i].dtype),
                                              typedView(staged[i].contiguous(), reductions[i].dtype), reductions[i].op);
                     staged[i].finish();
                   }
                 });
}

// ---- all-to-all and barrier -------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& outputSplits,
                                                               std::vector<int64_t>& inputSplits,
                                                               const c10d::AllToAllOptions& opts) {
  HIER_ROUTE_CUDA(input.is_cuda() || output.is_cuda(), alltoallBase(output, input, outputSplits, inputSplits, opts));
  const char* op = "all_to_all_single";
  checkTensor(op, input);
  checkTensor(op, output);
  HIER_REQUIRE(output.scalar_type() == input.scalar_type(), op, "output dtype ", dtypeName(output),
               " differs from the input's ", dtypeName(input));
  HIER_REQUIRE(input.dim() > 0 && output.dim() > 0, op, "needs tensors with at least one dimension to split");
  // Splits count rows of dimension 0; empty split lists mean equal parts.
  auto resolve = [&](const std::vector<int64_t>& splits, const at::Tensor& t, const char* which) {
    const int64_t rows = t.size(0);
    if (splits.empty()) {
      HIER_REQUIRE(rows % size_ == 0, op, "with no ", which, " splits, dimension 0 of the ", which, " (", rows,
                   ") must divide evenly by the group size (", size_, "); pass ", which, "_split_sizes");
      return std::vector<int64_t>(size_t(size_), rows / size_);
    }
    HIER_REQUIRE(splits.size() == size_t(size_), op, "needs one ", which, " split per rank (", size_, "), got ",
                 splits.size());
    int64_t sum = 0;
    for (int64_t s : splits) {
      HIER_REQUIRE(s >= 0, op, which, " split sizes must not be negative, got ", s);
      sum += s;
    }
    HIER_REQUIRE(sum == rows, op, "the ", which, " split sizes add up to ", sum, " but dimension 0 of the ", which,
                 " has ", rows, " rows; make them match");
    return splits;
  };
  const auto inRows = resolve(inputSplits, input, "input");
  const auto outRows = resolve(outputSplits, output, "output");
  const size_t inRowBytes = input.size(0) ? size_t(input.numel() / input.size(0)) * input.element_size() : 0;
  const size_t outRowBytes = output.size(0) ? size_t(output.numel() / output.size(0)) * output.element_size() : 0;
  // Reading and writing the same memory at once would scramble it: read from a copy then.
  at::Tensor in = input.contiguous();
  if (in.storage().is_alias_of(output.storage())) in = in.clone();
  Staged staged(output, /*copyIn=*/false);
  return enqueue(c10d::OpType::ALLTOALL_BASE, op, {input}, {output}, opts.timeout, opts.asyncOp,
                 [staged, in, inRows, outRows, inRowBytes, outRowBytes](Running& running) {
                   std::vector<Buffer> sends, receives;
                   size_t inOffset = 0, outOffset = 0;
                   for (size_t p = 0; p < inRows.size(); ++p) {
                     sends.push_back(byteView(in, inOffset, size_t(inRows[p]) * inRowBytes));
                     receives.push_back(byteView(staged.contiguous(), outOffset, size_t(outRows[p]) * outRowBytes));
                     inOffset += size_t(inRows[p]) * inRowBytes;
                     outOffset += size_t(outRows[p]) * outRowBytes;
                   }
                   auto c = running.next();
                   transport::alltoall(c, sends, receives);
                   staged.finish();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  HIER_ROUTE_CUDA(anyCuda(inputs) || anyCuda(outputs), alltoall(outputs, inputs, opts));
  const char* op = "all_to_all";
  HIER_REQUIRE(outputs.size() == size_t(size_) && inputs.size() == size_t(size_), op,
               "needs one input and one output tensor per rank (", size_, "), got ", inputs.size(), " and ",
               outputs.size());
  std::vector<at::Tensor> ins;
  std::vector<Staged> staged;
  for (int p = 0; p < size_; ++p) {
    checkTensor(op, inputs[size_t(p)]);
    checkTensor(op, outputs[size_t(p)]);
    HIER_REQUIRE(inputs[size_t(p)].scalar_type() == inputs[0].scalar_type() &&
                     outputs[size_t(p)].scalar_type() == inputs[0].scalar_type(),
                 op, "all tensors must share one dtype; found ", dtypeName(inputs[size_t(p)]), " and ",
                 dtypeName(outputs[size_t(p)]), " next to ", dtypeName(inputs[0]));
    at::Tensor in = inputs[size_t(p)].contiguous();
    ins.push_back(in);
    staged.emplace_back(outputs[size_t(p)], /*copyIn=*/false);
  }
  // An output that shares memory with an input would be overwritten while being sent: send copies.
  for (auto& in : ins) {
    for (auto& out : outputs) {
      if (in.storage().is_alias_of(out.storage())) in = in.clone();
    }
  }
  return enqueue(c10d::OpType::ALLTOALL, op, inputs, outputs, opts.timeout, opts.asyncOp,
                 [staged, ins](Running& running) {
                   std::vector<at::Tensor> targets;
                   for (auto& s : staged) targets.push_back(s.contiguous());
                   auto c = running.next();
                   transport::alltoall(c, bytesOfEach(ins), bytesOfEach(targets));
                   for (auto& s : staged) s.finish();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::barrier(const c10d::BarrierOptions& opts) {
  HIER_ROUTE_CUDA(opts.device && opts.device->is_cuda(), barrier(opts));
  return enqueue(c10d::OpType::BARRIER, "barrier", {}, {}, opts.timeout, opts.asyncOp, [](Running& running) {
    auto c = running.next();
    transport::barrier(c);
  });
}

}  // namespace hier
