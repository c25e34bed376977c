// ProcessGroupHier's collective calls: each is checked once, on the caller's thread, whatever its
// device; then CPU tensors get their body (host_bodies.hpp), queued on the group's executor, and CUDA
// tensors go to the CUDA path with the same validated arguments.
#include <c10/util/accumulate.h>

#include <algorithm>

#include "plugin/held_tensors.hpp"
#include "plugin/process_group_hier.hpp"
#include "plugin/tensors.hpp"
#ifdef HIER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>

#include "plugin/cuda/cuda_path.hpp"
#endif

namespace hier {
namespace {

std::string dtypeName(const at::Tensor& t) { return std::string(c10::toString(t.scalar_type())); }

std::vector<at::Tensor> joined(std::initializer_list<std::vector<at::Tensor>> lists) {
  std::vector<at::Tensor> all;
  for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
  return all;
}

// `ranks`: the group's size, by which AVG divides.
host::Reduction toReduction(const c10d::ReduceOp& reduceOp, const at::Tensor& tensor, int ranks,
                            const std::function<void(const std::string&)>& reject) {
  auto dtype = reductionType(tensor.scalar_type());
  if (!dtype) {
    reject("cannot reduce " + dtypeName(tensor) +
           " tensors; reductions support float32/64, float16, bfloat16, int8/16/32/64, uint8, bool and complex64/128");
  }
  auto [op, premultiply, deviceFactor] = transportReduceOp(reduceOp, reject);
  if ((premultiply || deviceFactor.defined()) && !at::isFloatingType(tensor.scalar_type()) &&
      !at::isComplexType(tensor.scalar_type())) {
    reject("PREMUL_SUM scales by a real factor and needs a floating-point or complex tensor, not " + dtypeName(tensor));
  }
  // CPU tensors are reduced on the host: a factor on a device is read now.
  if (deviceFactor.defined() && !tensor.is_cuda()) {
    premultiply = deviceFactor.item<double>();
    deviceFactor = at::Tensor();
  }
  host::Reduction reduction{op, *dtype, premultiply, deviceFactor};
  if (auto reason = transport::unsupportedReason(reduction.op, reduction.dtype)) reject(*reason);
  // Lowered here, once, so that every road (CPU, NCCL, hierarchical, staged) scales before it sums.
  if (op == transport::ReduceOp::Avg && transport::averagesByPremultiplying(*dtype)) {
    reduction = {transport::ReduceOp::Sum, *dtype, 1.0 / ranks, {}};
  }
  return reduction;
}

std::string rootOf(int root) { return "root " + std::to_string(root); }

std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
  return all;
}

bool anyOnCuda(const std::vector<at::Tensor>& tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) { return t.defined() && t.is_cuda(); });
}

// What every rank of a CPU collective must agree on (transport/agreement.h): the op, the element type of
// `typed`, `elements`, and in the builders below the reduction, the root, and each part's size.
Terms terms(const char* op, const at::Tensor& typed, int64_t elements, size_t parts = 1) {
  const char* dtype = typed.defined() ? pythonDtypeName(typed.scalar_type()) : "";
  return Terms{transport::CallSignature(op, dtype, uint64_t(elements), uint32_t(parts)), {}};
}

Terms reducing(Terms t, const host::Reduction& reduction) {
  t.signature.setReduceOp(reduction.premultiplies() ? "PREMUL_SUM" : transport::toString(reduction.op));
  return t;
}

Terms rooted(Terms t, int root) {
  t.signature.root = root;
  return t;
}

// Each part's size and type, where they must match part by part on every rank.
Terms partwise(Terms t, const std::vector<at::Tensor>& parts) {
  uint64_t layout = transport::kDigestSeed;
  for (const auto& part : parts) {
    layout = transport::digest(layout, uint64_t(part.numel()));
    layout = transport::digest(layout, uint64_t(part.scalar_type()));
  }
  t.signature.layout = layout;
  return t;
}

// The list of one tensor per rank that only the root of a gather (its outputs) or a scatter (its inputs)
// passes, each matching `like` (the call's single tensor) in dtype and size; empty on the other ranks,
// which must pass none. `role` names the list's tensors, `likeRole` the single one.
std::vector<at::Tensor> rootList(int rank, int size, int root, const std::vector<std::vector<at::Tensor>>& lists,
                                 const at::Tensor& like, const char* role, const char* likeRole,
                                 const std::function<void(const std::string&)>& reject) {
  if (rank != root) {
    if (!(lists.empty() || (lists.size() == 1 && lists[0].empty()))) {
      reject(c10::str("only the root (rank ", root, ") passes ", role, " tensors"));
    }
    return {};
  }
  if (!(lists.size() == 1 && lists[0].size() == size_t(size))) {
    reject(c10::str("the root needs one list of one ", role, " tensor per rank (", size, ")"));
  }
  for (const auto& t : lists[0]) {
    if (!(t.defined() && t.scalar_type() == like.scalar_type() && t.numel() == like.numel())) {
      reject(c10::str("every ", role, " must match the ", likeRole, "'s dtype and size (", dtypeName(like), ", ",
                      like.numel(), " elements)",
                      t.defined() ? "; got " + dtypeName(t) + ", " + std::to_string(t.numel()) : ""));
    }
  }
  return lists[0];
}

int64_t totalElements(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  return total;
}

}  // namespace

// A check every collective makes. Throws the convention's error through `invalid`.
#define HIER_REQUIRE(condition, op, ...)                  \
  do {                                                    \
    if (!(condition)) invalid(op, c10::str(__VA_ARGS__)); \
  } while (0)

// What the CUDA path is told of a validated call; `agreement`, what the ranks must agree on, goes with it
// under TORCH_DISTRIBUTED_DEBUG=DETAIL only (CudaPath::Call::terms).
#define HIER_CALL(type, op, opts, peers, agreement) \
  CudaPath::Call { type, op, opts.timeout, opts.asyncOp, peers, checksCuda_ ? std::optional(agreement) : std::nullopt }

#define HIER_REJECTS(op) [&](const std::string& why) { invalid(op, why); }

template <typename Call>
c10::intrusive_ptr<c10d::Work> ProcessGroupHier::refusable(c10d::OpType type, const char* op,
                                                           std::chrono::milliseconds timeout,
                                                           const std::vector<at::Tensor>& tensors, Call&& call) {
  try {
    return issued(call());
  } catch (const Refusal& refusal) {
    // CUDA collectives take an agreement under TORCH_DISTRIBUTED_DEBUG=DETAIL only: otherwise their
    // refusals stay with the rank that made them.
    if (checksCuda_ || !anyOnCuda(tensors)) refuse(type, op, core_->timeoutOf(timeout), refusal.reason());
    throw;
  }
}

// ---- allreduce, broadcast, reduce -----------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  return refusable(c10d::OpType::ALLREDUCE, op, opts.timeout, tensors, [&]() -> c10::intrusive_ptr<c10d::Work> {
    HIER_REQUIRE(tensors.size() == 1, op, "expects exactly one tensor, got ", tensors.size(),
                 "; use allreduce_coalesced for several");
    if (tensors[0].defined() && tensors[0].is_sparse()) return allreduceSparse(tensors[0], opts);
    HIER_REQUIRE(!opts.sparseIndices.has_value(), op, "sparse_indices are for sparse tensors; this one is dense");
    [[maybe_unused]] const On on = placement(op, tensors);
    const at::Tensor& tensor = tensors[0];
    const host::Reduction reduction = toReduction(opts.reduceOp, tensor, size_, HIER_REJECTS(op));
    Terms agreement = reducing(terms(op, tensor, tensor.numel()), reduction);
#ifdef HIER_WITH_CUDA
    if (on == On::Cuda) {
      return cuda().allreduce(tensor, reduction, HIER_CALL(c10d::OpType::ALLREDUCE, op, opts, "", agreement));
    }
#endif
    return enqueue(c10d::OpType::ALLREDUCE, op, {tensor}, {tensor}, opts.timeout, opts.asyncOp,
                   host::allreduce(tensor, reduction), std::move(agreement));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allreduceSparse(at::Tensor& tensor,
                                                                 const c10d::AllreduceOptions& opts) {
  // Called inside allreduce's refusable(): its refusals reach the other ranks.
  const char* op = "allreduce";
  core_->checkUsable(op);
  HIER_REQUIRE(tensor.device().is_cpu(), op, "sparse tensors on ", tensor.device().str(),
               " are not supported; hier sums sparse CPU tensors (move it to the CPU)");
  HIER_REQUIRE(opts.reduceOp == c10d::ReduceOp::SUM, op,
               "sparse tensors are summed only (ReduceOp.SUM), as with Gloo; pass a dense tensor for other reductions");
  return enqueue(c10d::OpType::ALLREDUCE, op, {tensor}, {tensor}, opts.timeout, opts.asyncOp,
                 host::allreduceSparse(tensor),
                 reducing(terms("allreduce_sparse", tensor, tensor.numel()),
                          toReduction(opts.reduceOp, tensor._values(), size_, HIER_REJECTS(op))));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  return refusable(
      c10d::OpType::ALLREDUCE_COALESCED, op, opts.timeout, tensors, [&]() -> c10::intrusive_ptr<c10d::Work> {
        HIER_REQUIRE(!tensors.empty(), op, "got no tensors");
        [[maybe_unused]] const On on = placement(op, tensors);
        std::vector<host::Reduction> reductions;
        for (auto& t : tensors) reductions.push_back(toReduction(opts.reduceOp, t, size_, HIER_REJECTS(op)));
        Terms agreement =
            partwise(reducing(terms(op, tensors[0], totalElements(tensors), tensors.size()), reductions[0]), tensors);
#ifdef HIER_WITH_CUDA
        if (on == On::Cuda) {
          return cuda().allreduceCoalesced(tensors, reductions,
                                           HIER_CALL(c10d::OpType::ALLREDUCE_COALESCED, op, opts, "", agreement));
        }
#endif
        return enqueue(c10d::OpType::ALLREDUCE_COALESCED, op, tensors, tensors, opts.timeout, opts.asyncOp,
                       host::allreduceCoalesced(tensors, reductions), std::move(agreement));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  return refusable(c10d::OpType::BROADCAST, op, opts.timeout, tensors, [&]() -> c10::intrusive_ptr<c10d::Work> {
    HIER_REQUIRE(tensors.size() == 1, op, "expects exactly one tensor, got ", tensors.size());
    HIER_REQUIRE(opts.rootRank >= 0 && opts.rootRank < size_, op, "root rank ", opts.rootRank,
                 " is outside the group's ranks 0..", size_ - 1, "; pass a rank of this group");
    HIER_REQUIRE(opts.rootTensor == 0, op, "root tensor ", opts.rootTensor, " does not exist: there is one tensor");
    [[maybe_unused]] const On on = placement(op, tensors);
    const at::Tensor& tensor = tensors[0];
    const int root = int(opts.rootRank);
    Terms agreement = rooted(terms(op, tensor, tensor.numel()), root);
#ifdef HIER_WITH_CUDA
    if (on == On::Cuda) {
      return cuda().broadcast(tensor, root, HIER_CALL(c10d::OpType::BROADCAST, op, opts, rootOf(root), agreement));
    }
#endif
    return enqueue(c10d::OpType::BROADCAST, op, {tensor}, {tensor}, opts.timeout, opts.asyncOp,
                   host::broadcast(tensor, root, rank_ == root), std::move(agreement), rootOf(root));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  return refusable(c10d::OpType::REDUCE, op, opts.timeout, tensors, [&]() -> c10::intrusive_ptr<c10d::Work> {
    HIER_REQUIRE(tensors.size() == 1, op, "expects exactly one tensor, got ", tensors.size());
    HIER_REQUIRE(opts.rootRank >= 0 && opts.rootRank < size_, op, "root rank ", opts.rootRank,
                 " is outside the group's ranks 0..", size_ - 1, "; pass a rank of this group");
    HIER_REQUIRE(opts.rootTensor == 0, op, "root tensor ", opts.rootTensor, " does not exist: there is one tensor");
    [[maybe_unused]] const On on = placement(op, tensors);
    const at::Tensor& tensor = tensors[0];
    const host::Reduction reduction = toReduction(opts.reduceOp, tensor, size_, HIER_REJECTS(op));
    const int root = int(opts.rootRank);
    Terms agreement = rooted(reducing(terms(op, tensor, tensor.numel()), reduction), root);
#ifdef HIER_WITH_CUDA
    if (on == On::Cuda) {
      return cuda().reduce(tensor, reduction, root, HIER_CALL(c10d::OpType::REDUCE, op, opts, rootOf(root), agreement));
    }
#endif
    return enqueue(c10d::OpType::REDUCE, op, {tensor}, {tensor}, opts.timeout, opts.asyncOp,
                   host::reduce(tensor, reduction, root, rank_ == root), std::move(agreement), rootOf(root));
  });
}

// ---- allgather and gather ---------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  return refusable(
      c10d::OpType::ALLGATHER, op, opts.timeout, joined({inputs, flat(outputs)}),
      [&]() -> c10::intrusive_ptr<c10d::Work> {
        HIER_REQUIRE(inputs.size() == 1 && outputs.size() == 1, op,
                     "expects one input tensor and one list of outputs, got ", inputs.size(), " and ", outputs.size());
        HIER_REQUIRE(outputs[0].size() == size_t(size_), op, "needs one output tensor per rank (", size_, "), got ",
                     outputs[0].size());
        [[maybe_unused]] const On on = placement(op, joined({inputs, outputs[0]}));
        const at::Tensor& input = inputs[0];
        for (auto& out : outputs[0]) {
          HIER_REQUIRE(out.scalar_type() == input.scalar_type(), op, "output dtype ", dtypeName(out),
                       " differs from the input's ", dtypeName(input), "; all tensors must share one dtype");
        }
        HIER_REQUIRE(outputs[0][size_t(rank_)].numel() == input.numel(), op, "this rank's output has ",
                     outputs[0][size_t(rank_)].numel(), " elements but the input has ", input.numel());
        Terms agreement = partwise(terms(op, input, totalElements(outputs[0]), outputs[0].size()), outputs[0]);
#ifdef HIER_WITH_CUDA
        if (on == On::Cuda) {
          return cuda().allgather(input, outputs[0], HIER_CALL(c10d::OpType::ALLGATHER, op, opts, "", agreement));
        }
#endif
        return enqueue(c10d::OpType::ALLGATHER, op, {input}, outputs[0], opts.timeout, opts.asyncOp,
                       host::allgather(input, outputs[0]), std::move(agreement));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  return refusable(c10d::OpType::_ALLGATHER_BASE, op, opts.timeout, {input, output},
                   [&]() -> c10::intrusive_ptr<c10d::Work> {
                     [[maybe_unused]] const On on = placement(op, {input, output});
                     HIER_REQUIRE(output.scalar_type() == input.scalar_type(), op, "output dtype ", dtypeName(output),
                                  " differs from the input's ", dtypeName(input));
                     HIER_REQUIRE(output.numel() == input.numel() * size_, op, "the output must hold group size (",
                                  size_, ") x input elements = ", input.numel() * size_, ", but has ", output.numel());
                     Terms agreement = terms(op, input, input.numel());
#ifdef HIER_WITH_CUDA
                     if (on == On::Cuda) {
                       return cuda().allgatherIntoTensor(
                           {input}, {output}, HIER_CALL(c10d::OpType::_ALLGATHER_BASE, op, opts, "", agreement));
                     }
#endif
                     return enqueue(c10d::OpType::_ALLGATHER_BASE, op, {input}, {output}, opts.timeout, opts.asyncOp,
                                    host::allgatherIntoTensor({input}, {output}, size_), std::move(agreement));
                   });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor_coalesced";
  return refusable(
      torch_compat::kAllgatherIntoTensorCoalesced, op, opts.timeout, joined({inputs, outputs}),
      [&]() -> c10::intrusive_ptr<c10d::Work> {
        HIER_REQUIRE(outputs.size() == inputs.size() && !inputs.empty(), op, "needs one output per input, got ",
                     outputs.size(), " outputs for ", inputs.size(), " inputs");
        [[maybe_unused]] const On on = placement(op, joined({inputs, outputs}));
        for (size_t i = 0; i < inputs.size(); ++i) {
          HIER_REQUIRE(outputs[i].scalar_type() == inputs[i].scalar_type(), op, "output ", i, " has dtype ",
                       dtypeName(outputs[i]), " but its input has ", dtypeName(inputs[i]));
          HIER_REQUIRE(outputs[i].numel() == inputs[i].numel() * size_, op, "output ", i, " must hold ",
                       inputs[i].numel() * size_, " elements, but has ", outputs[i].numel());
        }
        Terms agreement = partwise(terms(op, inputs[0], totalElements(inputs), inputs.size()), inputs);
#ifdef HIER_WITH_CUDA
        if (on == On::Cuda) {
          return cuda().allgatherIntoTensor(
              inputs, outputs, HIER_CALL(torch_compat::kAllgatherIntoTensorCoalesced, op, opts, "", agreement));
        }
#endif
        return enqueue(torch_compat::kAllgatherIntoTensorCoalesced, op, inputs, outputs, opts.timeout, opts.asyncOp,
                       host::allgatherIntoTensor(inputs, outputs, size_), std::move(agreement));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                     std::vector<at::Tensor>& inputs,
                                                                     const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  const std::vector<at::Tensor> outs = flat(outputs), all = joined({inputs, outs});
  return refusable(c10d::OpType::ALLGATHER_COALESCED, op, opts.timeout, all, [&]() -> c10::intrusive_ptr<c10d::Work> {
    HIER_REQUIRE(!inputs.empty(), op, "got no input tensors");
    HIER_REQUIRE(outputs.size() == size_t(size_), op, "needs one list of outputs per rank (", size_, "), got ",
                 outputs.size());
    [[maybe_unused]] const On on = placement(op, all);
    for (size_t r = 0; r < outputs.size(); ++r) {
      HIER_REQUIRE(outputs[r].size() == inputs.size(), op, "output list ", r, " has ", outputs[r].size(),
                   " tensors but there are ", inputs.size(), " inputs; each list needs one output per input");
      for (size_t i = 0; i < inputs.size(); ++i) {
        const at::Tensor& out = outputs[r][i];
        HIER_REQUIRE(out.scalar_type() == inputs[i].scalar_type() && out.numel() == inputs[i].numel(), op, "output ", i,
                     " of list ", r, " is ", dtypeName(out), " with ", out.numel(), " elements, but input ", i, " is ",
                     dtypeName(inputs[i]), " with ", inputs[i].numel(), "; each output must match its input");
      }
    }
    Terms agreement = partwise(terms(op, inputs[0], totalElements(inputs), inputs.size()), inputs);
#ifdef HIER_WITH_CUDA
    if (on == On::Cuda) {
      return cuda().allgatherCoalesced(inputs, outputs,
                                       HIER_CALL(c10d::OpType::ALLGATHER_COALESCED, op, opts, "", agreement));
    }
#endif
    return enqueue(c10d::OpType::ALLGATHER_COALESCED, op, inputs, outs, opts.timeout, opts.asyncOp,
                   host::allgatherCoalesced(inputs, outputs), std::move(agreement));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  const char* op = "gather";
  return refusable(c10d::OpType::GATHER, op, opts.timeout, joined({inputs, flat(outputs)}),
                   [&]() -> c10::intrusive_ptr<c10d::Work> {
                     HIER_REQUIRE(inputs.size() == 1, op, "expects exactly one input tensor, got ", inputs.size());
                     HIER_REQUIRE(opts.rootRank >= 0 && opts.rootRank < size_, op, "root rank ", opts.rootRank,
                                  " is outside the group's ranks 0..", size_ - 1, "; pass a rank of this group");
                     const int root = int(opts.rootRank);
                     const at::Tensor& input = inputs[0];
                     const std::vector<at::Tensor> outs =
                         rootList(rank_, size_, root, outputs, input, "output", "input", HIER_REJECTS(op));
                     return gatherInto(op, input, outs, root, opts);
                   });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::gatherInto(const char* op, const at::Tensor& input,
                                                            const std::vector<at::Tensor>& outs, int root,
                                                            const c10d::GatherOptions& opts) {
  [[maybe_unused]] const On on = placement(op, joined({{input}, outs}));
  Terms agreement = rooted(terms(op, input, input.numel()), root);
#ifdef HIER_WITH_CUDA
  if (on == On::Cuda) {
    return cuda().gather(input, outs, root, HIER_CALL(c10d::OpType::GATHER, op, opts, rootOf(root), agreement));
  }
#endif
  return enqueue(c10d::OpType::GATHER, op, {input}, outs, opts.timeout, opts.asyncOp, host::gather(input, outs, root),
                 std::move(agreement), rootOf(root));
}

#if HIER_TORCH_HAS_GATHER_SINGLE
c10::intrusive_ptr<c10d::Work> ProcessGroupHier::gather_single(at::Tensor& output, at::Tensor& input,
                                                               const c10d::GatherOptions& opts) {
  const char* op = "gather_single";
  return refusable(c10d::OpType::GATHER, op, opts.timeout, {input, output}, [&]() -> c10::intrusive_ptr<c10d::Work> {
    HIER_REQUIRE(opts.rootRank >= 0 && opts.rootRank < size_, op, "root rank ", opts.rootRank,
                 " is outside the group's ranks 0..", size_ - 1, "; pass a rank of this group");
    const int root = int(opts.rootRank);
    // On the root: the output's consecutive pieces, one per rank, each shaped as the input.
    std::vector<at::Tensor> outs;
    if (rank_ == root) {
      HIER_REQUIRE(output.scalar_type() == input.scalar_type(), op, "the output is ", dtypeName(output),
                   " but the input is ", dtypeName(input), "; give both one dtype");
      HIER_REQUIRE(output.numel() == input.numel() * size_, op, "the output holds ", output.numel(),
                   " elements, but one copy of the input (", input.numel(), " elements) per rank of ", size_, " needs ",
                   input.numel() * size_);
      HIER_REQUIRE(output.is_contiguous(), op, "the output must be contiguous; pass a contiguous tensor");
      const at::Tensor flatOutput = output.view({-1});
      for (int p = 0; p < size_; ++p)
        outs.push_back(flatOutput.narrow(0, p * input.numel(), input.numel()).view(input.sizes()));
    }
    return gatherInto(op, input, outs, root, opts);
  });
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  return refusable(c10d::OpType::SCATTER, op, opts.timeout, joined({outputs, flat(inputs)}),
                   [&]() -> c10::intrusive_ptr<c10d::Work> {
                     HIER_REQUIRE(outputs.size() == 1, op, "expects exactly one output tensor, got ", outputs.size());
                     HIER_REQUIRE(opts.rootRank >= 0 && opts.rootRank < size_, op, "root rank ", opts.rootRank,
                                  " is outside the group's ranks 0..", size_ - 1, "; pass a rank of this group");
                     const int root = int(opts.rootRank);
                     const at::Tensor& output = outputs[0];
                     const std::vector<at::Tensor> ins =
                         rootList(rank_, size_, root, inputs, output, "input", "output", HIER_REJECTS(op));
                     [[maybe_unused]] const On on = placement(op, joined({ins, outputs}));
                     Terms agreement = rooted(terms(op, output, output.numel()), root);
#ifdef HIER_WITH_CUDA
                     if (on == On::Cuda) {
                       return cuda().scatter(ins, output, root,
                                             HIER_CALL(c10d::OpType::SCATTER, op, opts, rootOf(root), agreement));
                     }
#endif
                     return enqueue(c10d::OpType::SCATTER, op, ins, {output}, opts.timeout, opts.asyncOp,
                                    host::scatter(ins, output, root), std::move(agreement), rootOf(root));
                   });
}

// ---- reduce_scatter ---------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  return refusable(
      c10d::OpType::REDUCE_SCATTER, op, opts.timeout, joined({outputs, flat(inputs)}),
      [&]() -> c10::intrusive_ptr<c10d::Work> {
        HIER_REQUIRE(outputs.size() == 1 && inputs.size() == 1, op,
                     "expects one output tensor and one list of inputs, got ", outputs.size(), " and ", inputs.size());
        HIER_REQUIRE(inputs[0].size() == size_t(size_), op, "needs one input tensor per rank (", size_, "), got ",
                     inputs[0].size());
        [[maybe_unused]] const On on = placement(op, joined({inputs[0], outputs}));
        const at::Tensor& output = outputs[0];
        const host::Reduction reduction = toReduction(opts.reduceOp, output, size_, HIER_REJECTS(op));
        for (auto& in : inputs[0]) {
          HIER_REQUIRE(in.scalar_type() == output.scalar_type(), op, "input dtype ", dtypeName(in),
                       " differs from the output's ", dtypeName(output), "; all tensors must share one dtype");
        }
        HIER_REQUIRE(inputs[0][size_t(rank_)].numel() == output.numel(), op, "the input for this rank has ",
                     inputs[0][size_t(rank_)].numel(), " elements but the output has ", output.numel());
        Terms agreement =
            partwise(reducing(terms(op, output, totalElements(inputs[0]), inputs[0].size()), reduction), inputs[0]);
#ifdef HIER_WITH_CUDA
        if (on == On::Cuda) {
          return cuda().reduceScatter(inputs[0], output, reduction,
                                      HIER_CALL(c10d::OpType::REDUCE_SCATTER, op, opts, "", agreement));
        }
#endif
        return enqueue(c10d::OpType::REDUCE_SCATTER, op, inputs[0], {output}, opts.timeout, opts.asyncOp,
                       host::reduceScatter(inputs[0], output, reduction), std::move(agreement));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  return refusable(
      c10d::OpType::_REDUCE_SCATTER_BASE, op, opts.timeout, {input, output}, [&]() -> c10::intrusive_ptr<c10d::Work> {
        [[maybe_unused]] const On on = placement(op, {input, output});
        HIER_REQUIRE(output.scalar_type() == input.scalar_type(), op, "output dtype ", dtypeName(output),
                     " differs from the input's ", dtypeName(input));
        HIER_REQUIRE(input.numel() == output.numel() * size_, op, "the input must hold group size (", size_,
                     ") x output elements = ", output.numel() * size_, ", but has ", input.numel());
        const host::Reduction reduction = toReduction(opts.reduceOp, output, size_, HIER_REJECTS(op));
        Terms agreement = reducing(terms(op, output, output.numel()), reduction);
#ifdef HIER_WITH_CUDA
        if (on == On::Cuda) {
          return cuda().reduceScatterTensor({input}, {output}, {reduction},
                                            HIER_CALL(c10d::OpType::_REDUCE_SCATTER_BASE, op, opts, "", agreement));
        }
#endif
        return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, op, {input}, {output}, opts.timeout, opts.asyncOp,
                       host::reduceScatterTensor({input}, {output}, {reduction}, size_), std::move(agreement));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  return refusable(
      torch_compat::kReduceScatterTensorCoalesced, op, opts.timeout, joined({inputs, outputs}),
      [&]() -> c10::intrusive_ptr<c10d::Work> {
        HIER_REQUIRE(outputs.size() == inputs.size() && !inputs.empty(), op, "needs one output per input, got ",
                     outputs.size(), " outputs for ", inputs.size(), " inputs");
        [[maybe_unused]] const On on = placement(op, joined({inputs, outputs}));
        std::vector<host::Reduction> reductions;
        for (size_t i = 0; i < inputs.size(); ++i) {
          HIER_REQUIRE(outputs[i].scalar_type() == inputs[i].scalar_type(), op, "output ", i, " has dtype ",
                       dtypeName(outputs[i]), " but its input has ", dtypeName(inputs[i]));
          HIER_REQUIRE(inputs[i].numel() == outputs[i].numel() * size_, op, "input ", i, " must hold ",
                       outputs[i].numel() * size_, " elements, but has ", inputs[i].numel());
          reductions.push_back(toReduction(opts.reduceOp, outputs[i], size_, HIER_REJECTS(op)));
        }
        Terms agreement =
            partwise(reducing(terms(op, outputs[0], totalElements(outputs), outputs.size()), reductions[0]), outputs);
#ifdef HIER_WITH_CUDA
        if (on == On::Cuda) {
          return cuda().reduceScatterTensor(
              inputs, outputs, reductions,
              HIER_CALL(torch_compat::kReduceScatterTensorCoalesced, op, opts, "", agreement));
        }
#endif
        return enqueue(torch_compat::kReduceScatterTensorCoalesced, op, inputs, outputs, opts.timeout, opts.asyncOp,
                       host::reduceScatterTensor(inputs, outputs, reductions, size_), std::move(agreement));
      });
}

// ---- all-to-all and barrier -------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& outputSplits,
                                                               std::vector<int64_t>& inputSplits,
                                                               const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all_single";
  return refusable(
      c10d::OpType::ALLTOALL_BASE, op, opts.timeout, {input, output}, [&]() -> c10::intrusive_ptr<c10d::Work> {
        [[maybe_unused]] const On on = placement(op, {input, output});
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
          HIER_REQUIRE(sum == rows, op, "the ", which, " split sizes add up to ", sum, " but dimension 0 of the ",
                       which, " has ", rows, " rows; make them match");
          return splits;
        };
        const auto inRows = resolve(inputSplits, input, "input");
        const auto outRows = resolve(outputSplits, output, "output");
        // The splits may differ by rank, and a rank may send no rows at all; the size of a row may not differ.
        Terms agreement = terms(op, input, c10::multiply_integers(input.sizes().slice(1)));
#ifdef HIER_WITH_CUDA
        if (on == On::Cuda) {
          return cuda().alltoallSingle(input, output, inRows, outRows,
                                       HIER_CALL(c10d::OpType::ALLTOALL_BASE, op, opts, "", agreement));
        }
#endif
        return enqueue(c10d::OpType::ALLTOALL_BASE, op, {input}, {output}, opts.timeout, opts.asyncOp,
                       host::alltoallSingle(input, output, inRows, outRows), std::move(agreement));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all";
  return refusable(
      c10d::OpType::ALLTOALL, op, opts.timeout, joined({inputs, outputs}), [&]() -> c10::intrusive_ptr<c10d::Work> {
        HIER_REQUIRE(outputs.size() == size_t(size_) && inputs.size() == size_t(size_), op,
                     "needs one input and one output tensor per rank (", size_, "), got ", inputs.size(), " and ",
                     outputs.size());
        [[maybe_unused]] const On on = placement(op, joined({inputs, outputs}));
        for (int p = 0; p < size_; ++p) {
          HIER_REQUIRE(inputs[size_t(p)].scalar_type() == inputs[0].scalar_type() &&
                           outputs[size_t(p)].scalar_type() == inputs[0].scalar_type(),
                       op, "all tensors must share one dtype; found ", dtypeName(inputs[size_t(p)]), " and ",
                       dtypeName(outputs[size_t(p)]), " next to ", dtypeName(inputs[0]));
        }
        Terms agreement = terms(op, inputs[0], 0, inputs.size());
#ifdef HIER_WITH_CUDA
        if (on == On::Cuda) {
          return cuda().alltoall(inputs, outputs, HIER_CALL(c10d::OpType::ALLTOALL, op, opts, "", agreement));
        }
#endif
        return enqueue(c10d::OpType::ALLTOALL, op, inputs, outputs, opts.timeout, opts.asyncOp,
                       host::alltoall(inputs, outputs), std::move(agreement));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::barrier(const c10d::BarrierOptions& opts) {
  const char* op = "barrier";
  releaseDeferred();  // as placement() does for the calls with tensors
  core_->checkUsable(op);
  Terms agreement = terms(op, at::Tensor(), 0, 0);
#ifdef HIER_WITH_CUDA
  // The device whose work the barrier orders: the one torch names (device_ids; torch's dispatcher drops
  // BarrierOptions::device on its way here), else the group's bound one; none where this process sees
  // no CUDA device (cuda_plan::barrierDevice). A CUDA device makes it a CUDA barrier.
  const int named = opts.device_ids.empty() ? -1 : int(opts.device_ids[0]);
  const std::optional<c10::Device> bound = getBoundDeviceId();
  const int device =
      cuda_plan::barrierDevice(named, bound && bound->is_cuda() ? int(bound->index()) : -1, c10::cuda::device_count());
  if (device >= 0) {
    return issued(cuda().barrier(c10::Device(c10::kCUDA, c10::DeviceIndex(device)),
                                 HIER_CALL(c10d::OpType::BARRIER, op, opts, "", agreement)));
  }
  // The CPU barrier, on every rank. One whose group ran CUDA work first lets that device finish what is
  // queued on it, here, on its own: what was enqueued before the barrier is done when it returns, as with
  // ProcessGroupNCCL, and no peer's road depends on it.
  if (const std::optional<c10::Device> last = lastCudaDevice()) cuda().drain(*last);
#endif
  return issued(
      enqueue(c10d::OpType::BARRIER, op, {}, {}, opts.timeout, opts.asyncOp, host::barrier(), std::move(agreement)));
}

void ProcessGroupHier::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  core_->checkUsable("monitored_barrier");
  const auto timeout = core_->timeoutOf(opts.timeout);
  // The messages are Gloo's, which torch's tests and users' log searches look for, then hier's words.
  const std::string where = " (hier: monitored_barrier on group '" + core_->name() + "', rank " +
                            std::to_string(rank_) + "/" + std::to_string(size_) + ")";
  if (timeout.count() == 0 && rank_ == 0) {
    C10_THROW_ERROR(DistBackendError,
                    "Rank 0 timed out in monitoredBarrier after 0 ms" + where + "; give it a timeout above zero");
  }
  if (size_ == 1) return;
  std::vector<int> missing;
  try {
    missing = core_->transport()->monitoredBarrier(transport::Deadline::after(timeout), waitAllRanks);
  } catch (const transport::Error& error) {
    C10_THROW_ERROR(DistBackendError, "Rank " + std::to_string(rank_) +
                                          " successfully reached monitoredBarrier, but received errors while waiting "
                                          "for send/recv from rank 0. Please check rank 0 logs for faulty rank." +
                                          where + ": " + error.what());
  }
  if (missing.empty()) return;
  std::string ranks;
  for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  C10_THROW_ERROR(DistBackendError, "[Rank 0]: Rank" + std::string(missing.size() > 1 ? "s " : " ") + ranks +
                                        " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) +
                                        " ms" + where + ": not called in time (hung, slow, or gone)");
}

}  // namespace hier
