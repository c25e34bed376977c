#include "plugin/operation.hpp"

namespace hier {

Issued issue(GroupCore& core, const char* op, std::chrono::milliseconds requested) {
  core.checkUsable(op);
  const uint64_t sequence = core.nextSequence();
  return Issued{op, sequence, core.operationTimeout(requested, /*pointToPoint=*/false, sequence)};
}

void Running::agree(std::optional<transport::PieceParts> piece, std::optional<size_t> total) {
  if (taken_) return;
  taken_ = true;
  if (terms_ == nullptr) {
    agreed_ = true;
    return;
  }
  const bool refused = !terms_->refusal.empty();
  const transport::CallSignature* mine = refused ? nullptr : &terms_->signature;
  // In place where it can be (one rank, or ranks that share an arena): no collective, no messages.
  std::optional<transport::Agreement> taken =
      transport::agreeInPlace(*core_.transport(), deadline_, mine, terms_->refusal, piece, total);
  if (!taken) {
    transport::Collective c = core_.nextCollective(deadline_, keepalive_);
    taken = transport::agree(c, mine, terms_->refusal, piece, total);
  }
  transport::Agreement& agreement = *taken;
  if (refused) return;  // the refusing rank raises its own error
  if (!agreement.agreed()) {
    throw transport::Error(transport::ErrorKind::InvalidUsage,
                           agreement.describe() + "; nothing was sent, and the group stays usable");
  }
  agreed_ = true;
  carried_ = std::move(agreement.carried);
}

std::exception_ptr runOperation(GroupCore& core, const Issued& issued, const transport::Deadline& deadline,
                                std::shared_ptr<const void> keepalive, const Terms* terms, const Body& body,
                                const FailureHooks& hooks) {
  const auto [op, sequence, timeout] = issued;
  for (;;) {
    if (auto refused = core.admit(op, sequence, deadline)) return refused;
    Running running(core, deadline, keepalive, terms);
    try {
      // Every issued collective learns the ranks' records first, on every rank: a group made after it
      // may take them from this one (ProcessGroupHier::learnFrom). Once learned, this costs a load.
      if (core.size() > 1) core.transport()->topology(deadline);
      if (body) body(running);
      running.agree(std::nullopt);  // a refusal, or a body that needed nothing but the agreement
      return nullptr;
    } catch (const transport::Error& failure) {
      // Stopped while the ranks were still agreeing, by the failure of an earlier operation: nothing of
      // this one moved; it runs once the group has recovered.
      if (!running.agreed() && core.retries(sequence, failure)) continue;
      if (hooks.failed) return hooks.failed(issued, failure);
      return core.fail(op, sequence, failure, timeout);
    } catch (const std::exception& local) {
      // A local failure part-way (memory, a torch op on the staged tensors): the others would wait for
      // this rank until their deadline; they are told now, and the group fails.
      core.broke(op, sequence, local.what());
      if (hooks.broke) hooks.broke(issued);
      return std::current_exception();
    } catch (...) {
      core.broke(op, sequence, "an unknown exception");
      if (hooks.broke) hooks.broke(issued);
      return std::current_exception();
    }
  }
}

}  // namespace hier
