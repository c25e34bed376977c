// The collectives on host tensors, as they run on the group's executor once a call was validated
// (ProcessGroupHier validates each call once, then routes it by device). The CPU path runs them on the
// caller's tensors; the CUDA path's staged route runs them on pinned host copies of its own.
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
#include "transport/agreement/agreement.h"
#include "transport/group/collective.h"
#include "transport/base/types.h"

namespace hier::host {

struct Terms;

// What a queued collective runs with: each transport collective it starts gets the group's next tag
// space, the operation's deadline, and the tensors to keep alive (UCX may hold their memory past a
// timeout). Before any of them, the ranks agree on the call (transport/agreement.h), once: the body's
// first next() or carry() takes the agreement, or run() does after a body that took neither.
class Running {
 public:
  // `terms`: what this rank brings to the agreement; null where the call takes none (the CUDA path).
  Running(GroupCore& core, const transport::Deadline& deadline, std::shared_ptr<const void> keepalive,
          const Terms* terms)
      : core_(core), deadline_(deadline), keepalive_(std::move(keepalive)), terms_(terms) {}

  transport::Collective next() {
    agree(std::nullopt);
    return core_.nextCollective(deadline_, keepalive_);
  }
  // For a small collective: takes the agreement carrying `piece` (this rank's whole contribution, its
  // parts one after another) and returns every rank's piece when every rank carried one; the body then
  // computes its results from them and moves nothing more. Null otherwise: the body goes on with next().
  // The pieces are valid until the body's next step on the group. `total`: what every rank's pieces
  // come to together in a valid call, where the body knows it (a rooted collective's: only the root
  // carries anything), which lets a piece be larger than carryLimit().
  const transport::Carried* carry(transport::PieceParts piece, std::optional<size_t> total = std::nullopt) {
    agree(piece, total);
    return carried_ ? &*carried_ : nullptr;
  }
  const transport::Carried* carry(std::initializer_list<std::span<const std::byte>> piece,
                                  std::optional<size_t> total = std::nullopt) {
    return carry(transport::PieceParts(piece.begin(), piece.size()), total);
  }
  // The most this rank's piece may be for carry() to carry it, without a total.
  size_t carryLimit() const { return transport::carryLimit(core_.size()); }
  int rank() const { return core_.rank(); }
  int size() const { return core_.size(); }
  // Takes the agreement if nothing took it yet. Throws the ranks' disagreement or a peer's refusal.
  void agree(std::optional<transport::PieceParts> piece, std::optional<size_t> total = std::nullopt);
  // Whether the ranks agreed on this call (then a failure from here on is one of the data's).
  bool agreed() const { return agreed_; }
  // Whether this call takes an agreement at all (the CUDA path's staged calls take none).
  bool takesAgreement() const { return terms_ != nullptr; }

 private:
  GroupCore& core_;
  const transport::Deadline deadline_;
  std::shared_ptr<const void> keepalive_;
  const Terms* terms_;
  bool taken_ = false, agreed_ = false;
  std::optional<transport::Carried> carried_;
};
using Body = std::function<void(Running&)>;

// What this rank brings to the agreement that runs before a collective (transport/agreement.h): the
// signature of its call, or why it refused the call (then it has no body to run).
struct Terms {
  transport::CallSignature signature;
  std::string refusal;
};

// Runs `body`, operation `op` number `sequence`, on the executor, by `deadline`, once the ranks agreed
// on `terms`. Returns its error: the group's, if it failed earlier; the ranks' disagreement or a
// peer's refusal (nothing was sent: the group stays usable); a transport failure as GroupCore::fail
// words it; or what it threw. A rank that refused gets no error from here: it raises its own.
std::exception_ptr run(GroupCore& core, const char* op, uint64_t sequence, const transport::Deadline& deadline,
                       std::shared_ptr<const void> keepalive, const Terms* terms, const Body& body);

// A reduction as the transport runs it: the op, the element type, and PREMUL_SUM's factor, which the
// host applies to the inputs before summing.
struct Reduction {
  transport::ReduceOp op;
  transport::DataType dtype;
  std::optional<double> premultiply;

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
