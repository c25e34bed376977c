// What a group's CPU and CUDA paths share, and nothing more: its name and the messages that name it, its
// sequence numbers, its executor, its work table, its transport group, and whether it failed.
// ProcessGroupHier (the c10d adapter) owns one and validates and routes each call; the host path
// (ProcessGroupHier::enqueue, host_bodies.hpp) and the CUDA path (cuda/) both work through this narrow
// surface, each operation through operation.hpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "plugin/executor.hpp"
#include "plugin/store_bootstrap.hpp"
#include "plugin/work.hpp"
#include "registry/work_table.hpp"
#include "transport/base/error.h"
#include "transport/group/collective.h"
#include "transport/group/group.h"

namespace hier {

// A call this rank refuses (bad arguments), raised as torch raises such errors (a c10::Error);
// `reason()` is what the other ranks are told (transport/agreement.h).
class Refusal : public c10::Error {
 public:
  Refusal(const std::string& label, const std::string& reason);
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// A job-wide unique id for a group's messages (transport/tag.h): rank 0 draws it from a counter in the
// job's root store (past every group's key prefix: `counter`'s root, `store`'s unless given) and publishes
// it under `key` in `store`; the others wait for it there.
uint32_t drawGroupId(c10d::Store& store, int rank, const std::string& key, std::chrono::milliseconds timeout,
                     c10d::Store* counter = nullptr);

class GroupCore {
 public:
  // Meets the other ranks through `bootstrap` (a job-wide group id, UCX addresses, host identities).
  // Throws transport::Error when that fails.
  GroupCore(std::shared_ptr<StoreBootstrap> bootstrap, uint32_t groupId, int rank, int size, std::string name,
            std::chrono::milliseconds timeout, const std::string& engineScope);
  ~GroupCore();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  uint32_t groupId() const { return groupId_; }
  // Torch names a group after it made its backend: messages use the name from then on.
  void rename(const std::string& name);
  std::chrono::milliseconds timeoutOf(std::chrono::milliseconds requested) const;
  void setTimeout(std::chrono::milliseconds timeout) { timeoutMs_.store(timeout.count()); }

  // "hier: <op> on group '<name>' (seq <n>, rank <r>/<size>)", the convention of every message.
  std::string label(const char* op, uint64_t sequence) const { return operationName(op, sequence).str(); }
  std::string label(const char* op) const { return label(op, sequence_.load()); }
  // The same, to spell out later (a work's, which most often nobody reads). `op` is a string literal.
  OperationName operationName(const char* op, uint64_t sequence) const {
    return OperationName{sharedName_, op, sequence, rank_, size_};
  }
  // Throws the convention's error for a bad argument (a Refusal): nothing was sent, the group stays usable.
  [[noreturn]] void invalid(const char* op, const std::string& what) const;
  // Throws when the group was shut down, or failed beyond recovery.
  void checkUsable(const char* op) const;
  // The error of operation `op` `sequence` that finds the group failed beyond recovery.
  std::exception_ptr unusable(const char* op, uint64_t sequence) const;

  // Recovery. A collective that fails while its data moves (a timeout, a size mismatch, a local
  // exception, another rank's notice of one) leaves the group failed *recoverably*: on the executor,
  // before each operation runs, admit() returns
  //   - an error for the operations numbered up to the failed one (they are part of the failure);
  //   - for the first one past it: nothing, once the ranks met in the store and this rank rebuilt its
  //     transport (a new tag space, new shared memory, new sub-groups, sequence numbers from zero), so
  //     that nothing of the failed operation can meet a later one. The ranks resume at the highest
  //     operation number any of them brings; a rank behind fails its operations up to it.
  // Only a rank that does not come to that meeting within the operation's deadline (dead, hung, or done
  // with the group), a peer's lost connection, an abort or a failed NCCL communicator fail the group for
  // good: then every call raises, saying to destroy or shrink it.
  std::exception_ptr admit(const char* op, uint64_t sequence, const transport::Deadline& deadline);
  // Whether operation `sequence`, stopped by `error` before the ranks agreed on it (so before any data
  // moved), runs again after recovery: it was aborted by the failure of an earlier operation.
  bool retries(uint64_t sequence, const transport::Error& error) const;

  // Collectives are numbered in issue order, the same on every rank; point-to-point on their own.
  uint64_t nextSequence() { return sequence_++; }
  uint64_t sequence() const { return sequence_.load(); }
  uint64_t nextPointToPoint() { return p2pSequence_++; }

  // A row in the work table for a new operation of `type`. `peers`: "root 2", "peer 3"; empty for the
  // whole group. `running`: it starts as it is issued (a blocking call run on the issuing thread).
  registry::WorkTable::Row addRow(c10d::OpType type, uint64_t sequence, bool pointToPoint, const char* op,
                                  c10::ArrayRef<at::Tensor> inputs, c10::ArrayRef<at::Tensor> outputs,
                                  const std::string& peers = {},
                                  registry::Clock::time_point issued = registry::Clock::now(), bool running = false);
  const registry::WorkTable& works() const { return *works_; }
  // torch's _register_on_completion_hook: `hook` gets each operation's WorkInfo once it finished
  // (succeeded or failed), on a thread of the group's own, in the order they finished. Once.
  void setCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)> hook);
  // torch 2.15's keyed completion hooks: each gets the completion key (WorkTable::Row::key) and duration of
  // every operation that succeeded, once, on the thread the hook above runs on, in the order they finished.
  using KeyedCompletionHook = std::function<void(uint64_t key, float durationMs)>;
  void registerCompletionHook(int64_t id, KeyedCompletionHook hook);
  void unregisterCompletionHook(int64_t id);
  // torch's _add_ephemeral_timeout: `extra` joins the timeout of every operation issued from now on,
  // until the first of them finished. Several add up, each ending with its own first operation.
  void addEphemeralTimeout(std::chrono::milliseconds extra);
  // A new operation's timeout: `requested` (kUnsetTimeout: the group's) and the ephemeral extensions,
  // which an extension added since the last new operation binds to this one (its numbering and number).
  std::chrono::milliseconds operationTimeout(std::chrono::milliseconds requested, bool pointToPoint, uint64_t sequence);
  // torch's abort hooks (register_abort_hook): run, each once per call, before the group aborts or fails
  // for a failure in flight, on the thread that found it. Keyed by the caller's id.
  void registerAbortHook(int64_t id, std::function<void()> hook);
  void unregisterAbortHook(int64_t id);
  // Waits until the completion hooks ran for every operation that finished before this call.
  void awaitCompletionHooks();
  // Waits, until `deadline`, for every task submitted to the executor so far to run.
  void awaitExecutor(const transport::Deadline& deadline);

  // Runs `task` after every task submitted before it, on the group's executor (`mayRunHere`: on this
  // thread when nothing is queued). Tasks must not throw.
  template <class F>
  void submit(F&& task, bool mayRunHere) {
    executor_.submit(std::forward<F>(task), mayRunHere);
  }
  // The right to run the next operation on this thread now (Executor::claim).
  Executor::Claim claimExecutor(bool mayRunHere) { return executor_.claim(mayRunHere); }
  // Runs the next queued operation on this thread, if it is free to run now (Executor::runNext).
  bool runNextHere() { return executor_.runNext(); }
  // The thread that completes point-to-point works off UCX's callbacks. A callback holds this, never the
  // group: UCX may call it back as the group closes, and then the task runs where it was submitted.
  const std::shared_ptr<Executor>& completions() const { return completions_; }

  // The group's transport: its communicator, topology and sub-groups. Replaced when the group recovers
  // (on the executor, between operations): a caller off the executor holds the pointer while it posts.
  // Throws once the group closed.
  std::shared_ptr<transport::Group> transport();
  const std::shared_ptr<StoreBootstrap>& bootstrap() const { return bootstrap_; }
  // How the group's ranks spread over hosts (learned once, by all ranks: a collective step). Kept here,
  // valid as long as the group: recovery replaces the transport that learned it, but not the hosts.
  const transport::Topology& topology();
  // The next transport collective of the group, with its own tag space. On the executor only.
  transport::Collective nextCollective(const transport::Deadline& deadline, std::shared_ptr<const void> keepalive);

  // Turns a transport failure of `op` into the error its work reports. A refusal leaves the group as it
  // was; any other failure asks the other ranks (through the store) which of them reached the
  // collective, writes the work table out, marks the group failed and aborts what is in flight on it.
  std::exception_ptr fail(const char* op, uint64_t sequence, const transport::Error& error,
                          std::chrono::milliseconds timeout);
  // Fails the group for good: later operations fail at once, saying `why` (the first reason given stays).
  void markFailed(const std::string& why);
  // An operation failed on this rank part-way (not a refusal): tells the other ranks at once (a failure
  // notice, transport::Group::tell), so that they fail it too instead of waiting out their deadline, and
  // marks the group failed.
  void broke(const char* op, uint64_t sequence, const std::string& why);
  bool failed() const;
  // Neither shut down nor failed for good (a recoverable failure leaves it usable).
  bool usable() const;
  std::string failure() const;

  // abort(): refuses new work, fails what is in flight and what is queued, now. Shutting down takes
  // two steps, around the CUDA path's own: drain() refuses new work and lets queued work finish (each
  // within its deadline); close() cancels what is left (a receive nobody sent to) and warns about work
  // nobody waited for.
  void abort();
  // The group made way for another with new members (ProcessGroupHier::reconfigure): as abort(), queued and
  // running operations failing with `why`, but the abort hooks do not run (nothing aborted).
  void retire(const std::string& why);
  // The completion hooks and the abort hooks registered on `old` (being retired) serve this group now.
  void takeHooksFrom(GroupCore& old);
  void drain();
  void close();
  bool shutDown() const { return shutDown_.load(); }

 private:
  std::string dumpWorkTable(uint64_t sequence, const std::vector<std::pair<int, std::string>>& reports,
                            const std::vector<int>& silent);
  void warnUnwaited() const;
  // This rank's part in the store's account of failed collective `sequence`: its work table's summary,
  // under reportPrefix(sequence) + its rank.
  static std::string reportPrefix(uint64_t sequence);
  void reportHere(uint64_t sequence);
  // Keeps one receive posted for the other ranks' failure notices; a notice fails the group here too.
  void listenForFailures();
  // A notice is "<sequence> <1 if recoverable, else 0>[ <gone rank>,...]\n<what failed>". `gone`: the ranks
  // the sender's transport saw end (a peer failure), which the others then do not wait for either.
  void tellPeers(const char* op, uint64_t sequence, const std::string& why, bool recoverable,
                 const std::vector<int>& gone = {});
  // Records a failure of collective `sequence` of transport `generation` (ignored when the group has
  // recovered since) and aborts what is in flight. A failure for good stays for good.
  void noteFailure(const std::string& why, uint64_t sequence, bool recoverable, uint64_t generation);
  std::exception_ptr recover(const char* op, uint64_t sequence, const transport::Deadline& deadline);
  std::shared_ptr<transport::Group> current() const;
  uint64_t currentGeneration() const;

  const int rank_;
  const int size_;
  std::string name_;
  // The same name, for operations' names (torch names a group before its first operation: rename()
  // never runs beside one).
  std::shared_ptr<const std::string> sharedName_;
  const uint32_t groupId_;
  std::atomic<std::chrono::milliseconds::rep> timeoutMs_;
  std::shared_ptr<registry::WorkTable> works_;
  std::shared_ptr<StoreBootstrap> bootstrap_;
  const std::string engineScope_;
  mutable std::mutex transportMutex_;
  std::shared_ptr<transport::Group> transport_;  // under transportMutex_
  std::mutex topologyMutex_;
  std::atomic<bool> topologyKept_{false};
  std::unique_ptr<const transport::Topology> topology_;
  Executor executor_;
  std::shared_ptr<Executor> completions_;
  // Whether failure notices still matter: cleared by abort() and close() before the completion thread
  // stops, so that a notice handed over as the group goes finds this, not a group that is gone.
  std::shared_ptr<std::atomic<bool>> listening_ = std::make_shared<std::atomic<bool>>(true);
  // What follows each operation's end (the work table's observer, which a work may call after the group
  // is gone, so shared with it): the completion hook, run on a thread of its own because it may take
  // the GIL; the end of ephemeral timeouts.
  struct Finishing {
    struct Extension {
      std::chrono::milliseconds extra;
      bool bound = false;  // to its first operation, below
      bool pointToPoint = false;
      uint64_t sequence = 0;
    };
    std::mutex mutex;
    std::function<void(std::shared_ptr<c10d::WorkInfo>)> hook;
    std::map<int64_t, KeyedCompletionHook> keyed;
    std::vector<Extension> extensions;
    std::atomic<bool> extended{false};  // !extensions.empty(), read without the lock
    Executor hooks{"hier-hooks"};
    void finished(const registry::WorkTable::Finished& work);
  };
  std::shared_ptr<Finishing> finishing_;
  std::atomic<bool> hooked_{false};
  // Abort hooks, by id; run outside the lock.
  std::mutex abortHooksMutex_;
  std::map<int64_t, std::function<void()>> abortHooks_;
  void runAbortHooks();

  std::atomic<uint64_t> sequence_{0};
  std::atomic<uint64_t> p2pSequence_{0};
  uint64_t transportSequence_ = 0;    // owned by the executor
  std::optional<uint64_t> resumeAt_;  // owned by the executor: where the ranks resume after a failure

  mutable std::mutex failureMutex_;
  std::string failure_;                  // why the group failed; empty while it is fine
  std::atomic<bool> hasFailure_{false};  // !failure_.empty(), read without the lock
  uint64_t failedSequence_ = 0;          // the latest collective a recoverable failure concerns
  bool recoverable_ = false;             // false: only a new group (or a shrink) goes on
  uint64_t generation_ = 0;              // how many times the transport was rebuilt after a failure
  std::atomic<bool> notified_{false};    // another rank's failure notice failed this group
  std::vector<int> noticedGone_;         // the ranks those notices saw end; under failureMutex_
  std::atomic<bool> shutDown_{false};    // no new work
  std::atomic<bool> closed_{false};
};

}  // namespace hier
