#include "plugin/group_core.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <future>
#include <sstream>
#include <thread>

#include "plugin/logging.hpp"
#include "plugin/tensors.hpp"
#include "plugin/work.hpp"
#include "transport/base/deadline.h"
#include "transport/base/error.h"
#include "transport/base/prefix_bootstrap.h"
#include "transport/base/tag.h"

namespace hier {
namespace {

std::exception_ptr backendError(const std::string& message) {
  return std::make_exception_ptr(c10::DistBackendError({__func__, __FILE__, uint32_t(__LINE__)}, message));
}

// A group name as part of a file name.
std::string fileSafe(const std::string& name) {
  std::string safe = name;
  for (char& c : safe) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return safe;
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// A failure notice as GroupCore::tellPeers writes it.
struct Notice {
  uint64_t sequence = 0;
  bool recoverable = false;
  std::vector<int> gone;
  std::string what;
};

Notice readNotice(const std::string& notice) {
  Notice told;
  const size_t header = notice.find('\n');
  if (header == std::string::npos) {
    told.what = notice;
    return told;
  }
  told.what = notice.substr(header + 1);
  std::istringstream fields(notice.substr(0, header));
  int recoverable = 0;
  fields >> told.sequence >> recoverable;
  told.recoverable = recoverable == 1;
  for (int rank = 0; fields >> rank;) {
    told.gone.push_back(rank);
    if (fields.peek() == ',') fields.get();
  }
  return told;
}

std::string text(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<uint8_t> bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

}  // namespace

uint32_t drawGroupId(c10d::Store& store, int rank, const std::string& key, std::chrono::milliseconds timeout,
                     c10d::Store* counter) {
  c10d::Store* root = counter != nullptr ? counter : &store;
  if (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(root)) root = prefixed->getUnderlyingNonPrefixStore().get();
  if (rank == 0) store.set(key, bytes(std::to_string(root->add("hier/group_id_counter", 1))));
  try {
    store.wait({key}, timeout);
  } catch (const c10::Error& error) {
    // The store's own message names a key, not the rank a user has to look at.
    throw transport::Error(transport::ErrorKind::Timeout,
                           transport::Deadline::timedOutAfter(timeout) +
                               " waiting for rank 0 to publish the group's id: it has not started, has ended or "
                               "cannot reach the store; look at its log (" +
                               error.what_without_backtrace() + ")",
                           {0});
  }
  return uint32_t(std::stoll(text(store.get(key))) % transport::kMaxTopLevelGroupIds);
}

GroupCore::GroupCore(std::shared_ptr<StoreBootstrap> bootstrap, uint32_t groupId, int rank, int size, std::string name,
                     std::chrono::milliseconds timeout, const std::string& engineScope)
    : rank_(rank),
      size_(size),
      name_(std::move(name)),
      sharedName_(std::make_shared<const std::string>(name_)),
      groupId_(groupId),
      timeoutMs_(timeout.count()),
      works_(std::make_shared<registry::WorkTable>(name_, rank, size)),
      bootstrap_(std::move(bootstrap)),
      engineScope_(engineScope),
      transport_(std::make_shared<transport::Group>(bootstrap_, rank, size, groupId, name_, engineScope)),
      executor_("hier-" + name_),
      completions_(std::make_shared<Executor>("hier-p2p-" + name_)),
      finishing_(std::make_shared<Finishing>()) {
  works_->onFinished(
      [finishing = finishing_](const registry::WorkTable::Finished& work) { finishing->finished(work); });
  listenForFailures();
}

void GroupCore::Finishing::finished(const registry::WorkTable::Finished& work) {
  std::function<void(std::shared_ptr<c10d::WorkInfo>)> run;
  std::vector<KeyedCompletionHook> runKeyed;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!extensions.empty()) {
      std::erase_if(extensions, [&](const Extension& e) {
        return e.bound && e.pointToPoint == work.pointToPoint && e.sequence == work.sequence;
      });
      extended.store(!extensions.empty());
    }
    run = hook;
    // Keyed hooks hear of successes only (torch's contract: a failed work must not read as completed).
    if (!work.failed) {
      for (const auto& [id, each] : keyed) runKeyed.push_back(each);
    }
  }
  if (!run && runKeyed.empty()) return;
  auto info = std::make_shared<c10d::WorkInfo>(c10d::OpType(work.opType), work.sequence, work.started, work.finished,
                                               std::chrono::duration<float>(work.finished - work.started));
  const float durationMs = std::chrono::duration<float, std::milli>(work.finished - work.started).count();
  hooks.submit(
      [run, info, runKeyed = std::move(runKeyed), key = work.key, durationMs] {
        // The hooks' own failures (a Python exception) must not end the group's hook thread.
        try {
          if (run) run(info);
        } catch (const std::exception& error) {
          hierLog(transport::LogLevel::Warning, std::string("hier: a completion hook raised: ") + error.what());
        }
        for (const auto& each : runKeyed) {
          try {
            each(key, durationMs);
          } catch (const std::exception& error) {
            hierLog(transport::LogLevel::Warning, std::string("hier: a completion hook raised: ") + error.what());
          }
        }
      },
      /*mayRunHere=*/false);
}

void GroupCore::registerCompletionHook(int64_t id, KeyedCompletionHook hook) {
  std::lock_guard<std::mutex> lock(finishing_->mutex);
  finishing_->keyed[id] = std::move(hook);
}

void GroupCore::unregisterCompletionHook(int64_t id) {
  std::lock_guard<std::mutex> lock(finishing_->mutex);
  finishing_->keyed.erase(id);
}

void GroupCore::setCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)> hook) {
  TORCH_CHECK(!hooked_.exchange(true), label("register_on_completion_hook"),
              ": a completion hook is registered already; register one per group, as with ProcessGroupNCCL");
  std::lock_guard<std::mutex> lock(finishing_->mutex);
  finishing_->hook = std::move(hook);
}

void GroupCore::addEphemeralTimeout(std::chrono::milliseconds extra) {
  std::lock_guard<std::mutex> lock(finishing_->mutex);
  finishing_->extensions.push_back({extra});
  finishing_->extended.store(true);
}

std::chrono::milliseconds GroupCore::operationTimeout(std::chrono::milliseconds requested, bool pointToPoint,
                                                      uint64_t sequence) {
  std::chrono::milliseconds timeout = timeoutOf(requested);
  if (!finishing_->extended.load()) return timeout;
  std::lock_guard<std::mutex> lock(finishing_->mutex);
  for (auto& extension : finishing_->extensions) {
    timeout += extension.extra;
    if (extension.bound) continue;
    extension.bound = true;
    extension.pointToPoint = pointToPoint;
    extension.sequence = sequence;
  }
  return timeout;
}

void GroupCore::registerAbortHook(int64_t id, std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(abortHooksMutex_);
  abortHooks_[id] = std::move(hook);
}

void GroupCore::unregisterAbortHook(int64_t id) {
  std::lock_guard<std::mutex> lock(abortHooksMutex_);
  abortHooks_.erase(id);
}

void GroupCore::runAbortHooks() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(abortHooksMutex_);
    for (const auto& [id, hook] : abortHooks_) hooks.push_back(hook);
  }
  for (const auto& hook : hooks) {
    try {
      hook();
    } catch (const std::exception& error) {
      hierLog(transport::LogLevel::Warning, label("abort") + ": an abort hook raised: " + error.what());
    }
  }
}

void GroupCore::awaitExecutor(const transport::Deadline& deadline) {
  auto ran = std::make_shared<std::promise<void>>();
  auto done = ran->get_future();
  executor_.submit([ran] { ran->set_value(); }, /*mayRunHere=*/true);
  done.wait_until(deadline.when);
}

void GroupCore::awaitCompletionHooks() {
  {
    std::lock_guard<std::mutex> lock(finishing_->mutex);
    if (!hooked_.load() && finishing_->keyed.empty()) return;
  }
  auto ran = std::make_shared<std::promise<void>>();
  auto done = ran->get_future();
  finishing_->hooks.submit([ran] { ran->set_value(); }, /*mayRunHere=*/false);
  done.wait();  // the hooks are the user's: as long as they take
}

void GroupCore::listenForFailures() {
  const uint64_t generation = currentGeneration();
  try {
    current()->listen(
        [this, completions = completions_, listening = listening_, generation](int from, const std::string& notice) {
          // On the messaging thread: the group's abort must not run here. The group may be closing: only
          // the task touches it, and only while it listens (on the completion thread, which close() drains,
          // or in place once that stopped, and then it no longer listens).
          completions->submit(
              [this, listening, generation, from, notice] {
                if (!listening->load()) return;
                const Notice told = readNotice(notice);
                hierLog(transport::LogLevel::Error, "hier: group '" + name_ + "' (rank " + std::to_string(rank_) +
                                                        "): rank " + std::to_string(from) + " reports: " + told.what);
                {
                  std::lock_guard<std::mutex> lock(failureMutex_);
                  for (int r : told.gone) {
                    if (r >= 0 && r < size_ &&
                        std::find(noticedGone_.begin(), noticedGone_.end(), r) == noticedGone_.end()) {
                      noticedGone_.push_back(r);
                    }
                  }
                }
                notified_.store(true);
                runAbortHooks();  // this rank fails too, and aborts what is in flight
                noteFailure(told.what, told.sequence, told.recoverable, generation);
              },
              /*mayRunHere=*/false);
        });
  } catch (const transport::Error&) {
    // The group is being aborted or shut down: there is nothing more to hear.
  }
}

void GroupCore::tellPeers(const char* op, uint64_t sequence, const std::string& why, bool recoverable,
                          const std::vector<int>& gone) {
  // Once per failure: after the first the others know, or learn it from the first notice.
  if (failed()) return;
  auto transport = current();
  if (!transport) return;
  std::string notice = std::to_string(sequence) + (recoverable ? " 1" : " 0");
  for (size_t i = 0; i < gone.size(); ++i) notice += (i ? "," : " ") + std::to_string(gone[i]);
  notice += "\n" + std::string(op) + " seq " + std::to_string(sequence) + " failed on rank " + std::to_string(rank_) +
            ": " + why;
  transport->tell(notice, transport::Deadline::after(std::chrono::milliseconds(1000)));
}

void GroupCore::broke(const char* op, uint64_t sequence, const std::string& why) {
  tellPeers(op, sequence, why, /*recoverable=*/true);
  noteFailure(std::string(op) + " seq " + std::to_string(sequence) + ": " + why, sequence, true, currentGeneration());
}

GroupCore::~GroupCore() {
  drain();
  close();
}

void GroupCore::rename(const std::string& name) {
  if (name.empty()) return;
  name_ = name;
  sharedName_ = std::make_shared<const std::string>(name);
  works_->setGroupName(name);
}

std::chrono::milliseconds GroupCore::timeoutOf(std::chrono::milliseconds requested) const {
  return requested.count() < 0 ? std::chrono::milliseconds(timeoutMs_.load()) : requested;
}

Refusal::Refusal(const std::string& label, const std::string& reason)
    : c10::Error({__func__, __FILE__, uint32_t(__LINE__)}, label + ": " + reason), reason_(reason) {}

void GroupCore::invalid(const char* op, const std::string& what) const { throw Refusal(label(op), what); }

void GroupCore::checkUsable(const char* op) const {
  if (shutDown_.load()) invalid(op, "the group was shut down or aborted; create a new group to communicate again");
  if (!hasFailure_.load(std::memory_order_acquire)) return;  // every operation asks: no lock while all is well
  std::lock_guard<std::mutex> lock(failureMutex_);
  if (!failure_.empty() && !recoverable_) {
    C10_THROW_ERROR(DistBackendError, label(op) + ": the group is unusable after an earlier failure (" + failure_ +
                                          "); destroy it (dist.destroy_process_group) and create a new one");
  }
}

std::exception_ptr GroupCore::unusable(const char* op, uint64_t sequence) const {
  return backendError(label(op, sequence) + ": the group is unusable after an earlier failure (" + failure() +
                      "); destroy it (dist.destroy_process_group) and create a new one");
}

std::exception_ptr GroupCore::admit(const char* op, uint64_t sequence, const transport::Deadline& deadline) {
  if (!hasFailure_.load(std::memory_order_acquire)) return nullptr;
  std::string why;
  bool recoverable;
  uint64_t failedAt;
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (failure_.empty()) return nullptr;
    why = failure_;
    recoverable = recoverable_ && !shutDown_.load();
    failedAt = failedSequence_;
  }
  if (!recoverable) return unusable(op, sequence);
  if (sequence <= failedAt) {
    return backendError(label(op, sequence) + ": not run: an earlier failure reached it (" + why +
                        "); the group recovers at its next operation, which every rank must call");
  }
  return recover(op, sequence, deadline);
}

bool GroupCore::retries(uint64_t sequence, const transport::Error& error) const {
  if (error.kind() != transport::ErrorKind::Aborted || shutDown_.load()) return false;
  std::lock_guard<std::mutex> lock(failureMutex_);
  return !failure_.empty() && recoverable_ && sequence > failedSequence_;
}

std::exception_ptr GroupCore::recover(const char* op, uint64_t sequence, const transport::Deadline& deadline) {
  uint64_t generation;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    generation = generation_ + 1;
    why = failure_;
  }
  // The meeting's keys live in the group's store under the new transport's number; so do the new
  // transport's own (addresses, host identities, shared memory), apart from every earlier one's.
  const std::string prefix = "hier/recover/" + std::to_string(generation) + "/";
  std::vector<int> silent;
  try {
    auto& store = bootstrap_->store();
    if (!resumeAt_) {
      store.set(prefix + "at/" + std::to_string(rank_), bytes(std::to_string(sequence)));
      auto pause = std::chrono::milliseconds(1);
      for (;;) {
        silent.clear();
        for (int r = 0; r < size_; ++r) {
          if (!store.check({prefix + "at/" + std::to_string(r)})) silent.push_back(r);
        }
        if (silent.empty() || deadline.passed()) break;
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(20));
      }
      if (silent.empty()) {
        uint64_t resume = 0;
        for (int r = 0; r < size_; ++r) {
          resume = std::max<uint64_t>(resume, std::stoull(text(store.get(prefix + "at/" + std::to_string(r)))));
        }
        resumeAt_ = resume;
      }
    }
    if (silent.empty() && sequence >= *resumeAt_) {
      const uint32_t id = drawGroupId(store, rank_, prefix + "group_id", deadline.remaining());
      auto fresh = std::make_shared<transport::Group>(std::make_shared<transport::PrefixBootstrap>(bootstrap_, prefix),
                                                      rank_, size_, id, name_, engineScope_);
      std::shared_ptr<transport::Group> old;
      {
        std::lock_guard<std::mutex> lock(transportMutex_);
        if (shutDown_.load()) return unusable(op, sequence);
        old = std::exchange(transport_, fresh);
      }
      {
        std::lock_guard<std::mutex> lock(failureMutex_);
        if (!recoverable_) return unusable(op, sequence);  // aborted, or failed for good, meanwhile
        generation_ = generation;
        failure_.clear();
        hasFailure_.store(false, std::memory_order_release);
        failedSequence_ = 0;
        recoverable_ = false;
        noticedGone_.clear();
      }
      transportSequence_ = 0;
      resumeAt_.reset();
      notified_.store(false);
      listenForFailures();
      hierLog(transport::LogLevel::Warning, "hier: group '" + name_ + "' (rank " + std::to_string(rank_) +
                                                "): recovered from a failure (" + why + "); resumes at seq " +
                                                std::to_string(sequence));
      return nullptr;  // `old`, aborted already, goes here
    }
  } catch (const std::exception& e) {
    markFailed("recovery after a failure (" + why + ") failed: " + e.what());
    return backendError(label(op, sequence) + ": the group could not recover from an earlier failure (" + why +
                        "): " + e.what() +
                        "; the group is unusable now: destroy it (dist.destroy_process_group) and create a new one");
  }
  if (!silent.empty()) {
    const std::string who = std::string("rank") + (silent.size() > 1 ? "s " : " ") + joinRanks(silent);
    markFailed(who + " did not come back after a failure (" + why + ")");
    const std::string message =
        label(op, sequence) + ": " + who + " did not come back within " + std::to_string(deadline.timeout.count()) +
        " ms after an earlier failure (" + why +
        "): dead, hung, or no longer calling this group's operations. The group is unusable now: destroy it "
        "(dist.destroy_process_group) and create a new one, or leave the silent ranks out with dist.shrink_group";
    return std::make_exception_ptr(TimedOut({__func__, __FILE__, uint32_t(__LINE__)}, message));
  }
  return backendError(label(op, sequence) + ": not run: another rank was already past it when the group failed (" +
                      why + "); the group resumes at seq " + std::to_string(*resumeAt_));
}

registry::WorkTable::Row GroupCore::addRow(c10d::OpType type, uint64_t sequence, bool pointToPoint, const char* op,
                                           c10::ArrayRef<at::Tensor> inputs, c10::ArrayRef<at::Tensor> outputs,
                                           const std::string& peers, registry::Clock::time_point issued, bool running) {
  // Every field is assigned in place: the row may be an earlier one's, whose capacity is reused.
  auto describe = [](std::vector<registry::WorkInfo::Shape>& shapes, c10::ArrayRef<at::Tensor> tensors) {
    shapes.resize(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].defined()) {
        const auto sizes = tensors[i].sizes();
        shapes[i].assign(sizes.begin(), sizes.end());
      } else {
        shapes[i].clear();
      }
    }
  };
  return works_->add(pointToPoint, issued, running, [&](registry::WorkInfo& info) {
    info.sequence = sequence;
    info.op = op;
    info.opType = int(type);
    const auto typed = !inputs.empty() ? inputs : outputs;
    if (!typed.empty() && typed[0].defined()) {
      info.dtype = pythonDtypeName(typed[0].scalar_type());
    } else {
      info.dtype.clear();
    }
    describe(info.inputs, inputs);
    describe(info.outputs, outputs);
    info.peers = peers;
  });
}

std::shared_ptr<transport::Group> GroupCore::current() const {
  std::lock_guard<std::mutex> lock(transportMutex_);
  return transport_;
}

std::shared_ptr<transport::Group> GroupCore::transport() {
  auto transport = current();
  if (!transport) throw transport::Error(transport::ErrorKind::Aborted, "the group was shut down");
  return transport;
}

const transport::Topology& GroupCore::topology() {
  if (topologyKept_.load(std::memory_order_acquire)) return *topology_;
  // A throw (the deadline) leaves it to the next call; as transport::Group::topology, not call_once.
  std::lock_guard<std::mutex> lock(topologyMutex_);
  if (!topology_) {
    const auto deadline = transport::Deadline::after(timeoutOf(std::chrono::milliseconds(-1)));
    topology_ = std::make_unique<const transport::Topology>(transport()->topology(deadline));
    topologyKept_.store(true, std::memory_order_release);
  }
  return *topology_;
}

transport::Collective GroupCore::nextCollective(const transport::Deadline& deadline,
                                                std::shared_ptr<const void> keepalive) {
  // Only the executor replaces the transport, between operations: it outlives this collective.
  return transport::Collective(*transport(), transportSequence_++, deadline, std::move(keepalive));
}

bool GroupCore::failed() const {
  std::lock_guard<std::mutex> lock(failureMutex_);
  return !failure_.empty();
}

uint64_t GroupCore::currentGeneration() const {
  std::lock_guard<std::mutex> lock(failureMutex_);
  return generation_;
}

bool GroupCore::usable() const {
  if (shutDown_.load()) return false;
  std::lock_guard<std::mutex> lock(failureMutex_);
  return failure_.empty() || recoverable_;
}

std::string GroupCore::failure() const {
  std::lock_guard<std::mutex> lock(failureMutex_);
  return failure_;
}

void GroupCore::markFailed(const std::string& why) {
  runAbortHooks();
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (failure_.empty()) failure_ = why;
    hasFailure_.store(true, std::memory_order_release);
    recoverable_ = false;
  }
  if (auto transport = current()) transport->abort("the group failed: " + why);
}

void GroupCore::noteFailure(const std::string& why, uint64_t sequence, bool recoverable, uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (generation != generation_) return;  // about a transport the group has replaced since
    if (failure_.empty()) {
      failure_ = why;
      hasFailure_.store(true, std::memory_order_release);
      failedSequence_ = sequence;
      recoverable_ = recoverable;
    } else {
      failedSequence_ = std::max(failedSequence_, sequence);
      recoverable_ = recoverable_ && recoverable;
    }
  }
  // Whatever is still in flight on this group belongs to a broken exchange.
  if (auto transport = current()) transport->abort("the group failed: " + why);
}

std::exception_ptr GroupCore::fail(const char* op, uint64_t sequence, const transport::Error& error,
                                   std::chrono::milliseconds timeout) {
  std::string message = label(op, sequence) + ": " + error.what();
  if (error.kind() == transport::ErrorKind::Timeout) {
    message +=
        " (the operation's timeout is the group's, from init_process_group(timeout=...) or "
        "new_group(timeout=...), unless the call passes its own)";
  }
  if (error.kind() == transport::ErrorKind::InvalidUsage) {
    // Refused before anything was sent: the group is fine.
    return std::make_exception_ptr(c10::Error({__func__, __FILE__, uint32_t(__LINE__)}, message));
  }
  runAbortHooks();  // before the group aborts what is in flight
  // A lost connection means a dead or unreachable peer: the group cannot meet again. Anything else (a
  // timeout, a mismatch, a notice) it can (admit()); a rank that does not come back is found then.
  const bool recoverable = error.kind() != transport::ErrorKind::PeerFailure;
  // Before anything slow (the store, the work table's dump): the others stop waiting for this rank now.
  // An abort is already known to them (it came from a notice, or from this group's own abort).
  // The peers whose process the transport saw end, or whose connection broke: they will not report
  // below, and the notice names them, so that no rank waits for their reports.
  const std::vector<int> seenGone =
      error.kind() == transport::ErrorKind::PeerFailure ? error.peers() : std::vector<int>{};
  if (error.kind() != transport::ErrorKind::Aborted) tellPeers(op, sequence, error.what(), recoverable, seenGone);
  const bool waited =
      error.kind() == transport::ErrorKind::Timeout || error.kind() == transport::ErrorKind::PeerFailure;
  // Stopped by another rank's failure notice: this rank was at the collective all the same. The notice
  // names what its sender waited for, which may be a rank that itself waited for a dead one.
  const bool notified = error.kind() == transport::ErrorKind::Aborted && notified_.load();
  if (waited || notified) {
    // Ask the others which of them reached this collective: every rank that fails here reports itself
    // (its work table's summary), then waits a little for the reports of the rest. A rank that is dead
    // or never came stays silent, and is named.
    std::vector<int> silent, failed;
    std::vector<std::pair<int, std::string>> reports;
    try {
      auto& store = bootstrap_->store();
      const std::string prefix = reportPrefix(sequence);
      reportHere(sequence);
      // A notified rank learned of the failure early, and the live ranks report at once: it keeps to the
      // second in which every rank should fail.
      auto grace =
          std::clamp(timeout / 4, std::chrono::milliseconds(200), std::chrono::milliseconds(notified ? 500 : 2000));
      // A rank this rank's transport saw end, or that a notice named as ended, does not report: waiting
      // for it would only hold this failure back by the whole grace.
      std::vector<int> gone = seenGone;
      {
        std::lock_guard<std::mutex> lock(failureMutex_);
        gone.insert(gone.end(), noticedGone_.begin(), noticedGone_.end());
      }
      auto isGone = [&](int r) { return std::find(gone.begin(), gone.end(), r) != gone.end(); };
      const auto began = std::chrono::steady_clock::now();
      do {
        silent.clear();
        failed.clear();
        for (int r = 0; r < size_; ++r) {
          (store.check({prefix + std::to_string(r)}) ? failed : silent).push_back(r);
        }
        if (std::all_of(silent.begin(), silent.end(), isGone)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } while (std::chrono::steady_clock::now() < began + grace);
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
      for (int r : failed) {
        auto report = store.get(prefix + std::to_string(r));
        reports.emplace_back(r, std::string(report.begin(), report.end()));
      }
      std::vector<int> silentGone, silentAwaited;
      for (int r : silent) (isGone(r) ? silentGone : silentAwaited).push_back(r);
      auto ranks = [](const std::vector<int>& list) {
        return (list.size() > 1 ? "ranks " : "rank ") + joinRanks(list);
      };
      if (silent.empty()) {
        message += "; every rank reached this collective and failed in it";
      } else {
        if (!silentGone.empty()) {
          message += "; " + ranks(silentGone) + " gone (process ended or connection broken), not waited for";
        }
        if (!silentAwaited.empty()) {
          message += "; no report within " + std::to_string(waited.count()) + " ms from " + ranks(silentAwaited) +
                     " (not arrived at this collective, dead, or already done with its part)";
        }
        message += ", while " + ranks(failed) + " failed in it";
      }
    } catch (const std::exception&) {
      // The store may have gone with the failed rank; the transport's account stands alone.
    }
    std::string dump = dumpWorkTable(sequence, reports, silent);
    if (!dump.empty())
      message += "; this rank's work table and the others' reports are in " + dump + ".txt (and .json)";
  }
  noteFailure(std::string(op) + " seq " + std::to_string(sequence) + ": " + error.what(), sequence, recoverable,
              currentGeneration());
  const bool timedOut = error.kind() == transport::ErrorKind::Timeout;
  std::lock_guard<std::mutex> lock(failureMutex_);
  message += recoverable_ ? "; the group goes on at its next operation, which every rank must call (the ranks meet "
                            "first; a rank that does not come fails the group for good)"
                          : "; the group is unusable now (a peer is dead or unreachable, or the group was aborted): "
                            "destroy it (dist.destroy_process_group) and create a new one, or leave the dead rank "
                            "out with dist.shrink_group";
  if (timedOut) return std::make_exception_ptr(TimedOut({__func__, __FILE__, uint32_t(__LINE__)}, message));
  return backendError(message);
}

std::string GroupCore::reportPrefix(uint64_t sequence) { return "hier/failed/" + std::to_string(sequence) + "/"; }

void GroupCore::reportHere(uint64_t sequence) {
  const std::string mine = works_->summary();
  bootstrap_->store().set(reportPrefix(sequence) + std::to_string(rank_),
                          std::vector<uint8_t>(mine.begin(), mine.end()));
}

std::string GroupCore::dumpWorkTable(uint64_t sequence, const std::vector<std::pair<int, std::string>>& reports,
                                     const std::vector<int>& silent) {
  std::string text = "what the ranks reported when seq " + std::to_string(sequence) + " failed:\n";
  std::string json = "\"failed_seq\": " + std::to_string(sequence) + ", \"reports\": {";
  for (size_t i = 0; i < reports.size(); ++i) {
    text += "  " + reports[i].second + "\n";
    json += (i ? ", " : "") + registry::jsonString(std::to_string(reports[i].first)) + ": " +
            registry::jsonString(reports[i].second);
  }
  json += "}, \"silent\": [";
  for (size_t i = 0; i < silent.size(); ++i) {
    text += "  rank " + std::to_string(silent[i]) + ": no report (not at this collective, dead, or done with it)\n";
    json += (i ? ", " : "") + std::to_string(silent[i]);
  }
  json += "]";
  const std::string stem = fileSafe(name_) + ".rank" + std::to_string(rank_) + ".seq" + std::to_string(sequence) +
                           ".pid" + std::to_string(getpid());
  std::string path = works_->writeDump(registry::dumpDirectory(), stem, text, json);
  hierLog(transport::LogLevel::Error,
          works_->text(text) + (path.empty() ? "(could not write it to " + registry::dumpDirectory() + ")"
                                             : "(also in " + path + ".txt and .json)"));
  return path;
}

void GroupCore::warnUnwaited() const {
  size_t notKept = 0;
  auto rows = works_->unwaited(&notKept);
  if (rows.empty() && notKept == 0) return;
  constexpr size_t kListed = 8;
  std::string list;
  for (size_t i = 0; i < rows.size() && i < kListed; ++i) {
    const auto& r = rows[i];
    list += std::string(i ? "; " : "") + (r.info.pointToPoint ? "p2p seq " : "seq ") + std::to_string(r.info.sequence) +
            " " + r.info.op + " (" + registry::toString(r.state) + ")";
  }
  if (rows.size() > kListed) list += "; and " + std::to_string(rows.size() - kListed) + " more";
  if (notKept > 0) list += "; and " + std::to_string(notKept) + " older ones not kept";
  TORCH_WARN("hier: group '", name_, "' (rank ", rank_, "/", size_, ") shut down with ", rows.size() + notKept,
             " operation(s) nobody waited for: ", list,
             ". Call wait() on every Work (or wait_tensor on a functional collective's output); an error in an ",
             "operation nobody waits for goes unnoticed");
}

void GroupCore::abort() {
  listening_->store(false);  // the group's own abort outranks any notice
  runAbortHooks();
  retire("the group was aborted");
}

void GroupCore::retire(const std::string& why) {
  listening_->store(false);
  shutDown_.store(true);
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (failure_.empty()) failure_ = why;
    hasFailure_.store(true, std::memory_order_release);
    recoverable_ = false;
  }
  if (auto transport = current()) transport->abort(why);
  executor_.drainAndStop();  // queued work fails fast now
  completions_->drainAndStop();
}

void GroupCore::takeHooksFrom(GroupCore& old) {
  // The completion hooks are copied (the old group's still report what it fails as it retires); the abort
  // hooks move, so that nothing the old group's retirement does (its CUDA path's abort) runs them.
  {
    std::scoped_lock lock(old.finishing_->mutex, finishing_->mutex);
    if (old.finishing_->hook) {
      finishing_->hook = old.finishing_->hook;
      hooked_.store(true);
    }
    finishing_->keyed = old.finishing_->keyed;
  }
  std::scoped_lock lock(old.abortHooksMutex_, abortHooksMutex_);
  abortHooks_ = std::exchange(old.abortHooks_, {});
}

void GroupCore::drain() {
  shutDown_.store(true);
  executor_.drainAndStop();
}

void GroupCore::close() {
  if (closed_.exchange(true)) return;
  listening_->store(false);
  current()->abort(failed() ? "the group was aborted" : "the group was shut down");
  completions_->drainAndStop();
  {
    std::lock_guard<std::mutex> lock(finishing_->mutex);
    finishing_->hook = nullptr;  // an operation that ends later (a device's) is nobody's business now
    finishing_->keyed.clear();
  }
  finishing_->hooks.drainAndStop();
  warnUnwaited();
  // Nothing uses the transport now (the executor and the CUDA path's threads are done, new calls are
  // refused): the last group to go takes UCX's threads and endpoints with it.
  std::shared_ptr<transport::Group> last;
  {
    std::lock_guard<std::mutex> lock(transportMutex_);
    last = std::move(transport_);
  }
}

}  // namespace hier
