// One collective's life on its group, the same whichever road it takes (host memory, NCCL, a schedule
// across hosts, staged through host memory):
//
//   issue  on the caller's thread: refused if the group takes nothing more, numbered in program order
//          (the same on every rank), given its deadline;
//   admit  on the group's executor, before it runs: GroupCore::admit (a failed group fails it, a
//          recovered one lets it go on), then the ranks' agreement on its terms, when it takes one;
//   run    its body;
//   fail   a transport failure becomes its error through GroupCore::fail (and the road's own hook: the
//          CUDA path aborts NCCL where it must); a local failure part-way tells the other ranks
//          (GroupCore::broke);
//   watch  for device memory, the watchdog follows the device to the operation's end
//          (cuda/cuda_watchdog.hpp).
//
// ProcessGroupHier::enqueue (host memory) and the three roads of the CUDA path (cuda/cuda_path.cpp)
// are all made of issue() and runOperation().
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "plugin/group_core.hpp"
#include "transport/agreement/agreement.h"
#include "transport/base/deadline.h"
#include "transport/base/error.h"
#include "transport/group/collective.h"

namespace hier {

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

// An operation issued: its op (a string literal), its number and its deadline's length.
struct Issued {
  const char* op;
  uint64_t sequence;
  std::chrono::milliseconds timeout;
};
// Issues collective `op` on `core`'s group, with `requested` as its timeout (kUnsetTimeout: the
// group's). Throws when the group takes nothing more.
Issued issue(GroupCore& core, const char* op, std::chrono::milliseconds requested);

// What a road adds to the failure handling every operation gets.
struct FailureHooks {
  // A transport failure: the operation's error (null: GroupCore::fail's words alone).
  std::function<std::exception_ptr(const Issued&, const transport::Error&)> failed;
  // After a local failure part-way was told to the other ranks.
  std::function<void(const Issued&)> broke;
};

// Admits operation `issued`, then runs `body`, by `deadline`, once the ranks agreed on `terms` (null:
// the call takes no agreement). Returns its error: the group's, if it failed earlier; the ranks'
// disagreement or a peer's refusal (nothing was sent: the group stays usable); a transport failure as
// GroupCore::fail (or the hook) words it; or what it threw. A rank that refused gets no error from
// here: it raises its own. On the executor.
std::exception_ptr runOperation(GroupCore& core, const Issued& issued, const transport::Deadline& deadline,
                                std::shared_ptr<const void> keepalive, const Terms* terms, const Body& body,
                                const FailureHooks& hooks = {});

}  // namespace hier
