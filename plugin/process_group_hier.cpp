// ProcessGroupHier's life cycle, the path every collective takes (enqueue, run, fail), and the
// point-to-point operations. The collectives themselves are in collectives.cpp.
#include "plugin/process_group_hier.hpp"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <thread>

#include "plugin/logging.hpp"
#ifdef HIER_WITH_CUDA
#include "plugin/cuda/cuda_path.hpp"
#endif
#include "plugin/store_bootstrap.hpp"
#include "plugin/tensors.hpp"
#include "registry/group_registry.hpp"
#include "transport/error.h"
#include "transport/tag.h"

namespace hier {
namespace {

// Each group's messages carry a job-wide unique id: rank 0 of the group draws it from a counter in the
// job's root store (past every group's key prefix) and publishes it in the group's store.
uint32_t allocateGroupId(const c10::intrusive_ptr<c10d::Store>& store, int rank, std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Store> root = store;
  if (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(store.get())) root = prefixed->getUnderlyingNonPrefixStore();
  const std::string key = "hier/group_id";
  if (rank == 0) {
    int64_t id = root->add("hier/group_id_counter", 1);
    std::string text = std::to_string(id);
    store->set(key, std::vector<uint8_t>(text.begin(), text.end()));
  }
  store->wait({key}, timeout);
  auto value = store->get(key);
  return uint32_t(std::stoll(std::string(value.begin(), value.end())) % transport::kMaxTopLevelGroupIds);
}

std::exception_ptr backendError(const std::string& message) {
  return std::make_exception_ptr(c10::DistBackendError({__func__, __FILE__, uint32_t(__LINE__)}, message));
}

// Ranks that share a process (threads as ranks, rank-local mode) need a UCX engine each.
std::string engineScope() {
  auto key = registry::rankKey();
  return key ? "thread-" + std::to_string(*key) : std::string();
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

}  // namespace

ProcessGroupHier::ProcessGroupHier(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   c10::intrusive_ptr<Options> options)
    : c10d::Backend(rank, size),
      options_(std::move(options)),
      groupName_(options_->group_name.empty() ? "default_pg" : options_->group_name),
      works_(std::make_shared<registry::WorkTable>(groupName_, rank, size)),
      executor_("hier-" + groupName_),
      completions_("hier-p2p-" + groupName_),
      timeoutMs_(options_->timeout.count()) {
  init();
  installLogSink();
  TORCH_CHECK(size > 0 && rank >= 0 && rank < size, "hier: cannot create group '", groupName_, "': rank ", rank,
              " is not within a group of size ", size);
  try {
    bootstrap_ = std::make_shared<StoreBootstrap>(store);
    groupId_ = allocateGroupId(store, rank, options_->timeout);
    communicator_ = std::make_unique<transport::Communicator>(bootstrap_, rank, size, groupId_, groupName_,
                                                              transport::ucx::Engine::acquire(engineScope()));
  } catch (const transport::Error& error) {
    C10_THROW_ERROR(DistBackendError, "hier: cannot create group '" + groupName_ + "' (rank " + std::to_string(rank) +
                                          "/" + std::to_string(size) + "): " + error.what());
  }
  std::string ranks;
  for (auto r : options_->global_ranks_in_group) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  hierLog(transport::LogLevel::Info, "group '" + groupName_ + "': rank " + std::to_string(rank) + " of " +
                                         std::to_string(size) + ", id " + std::to_string(groupId()) +
                                         (ranks.empty() ? "" : ", global ranks [" + ranks + "]"));
}

ProcessGroupHier::~ProcessGroupHier() { shutdown(); }

void ProcessGroupHier::setGroupUid(const std::string& name) {
  c10d::Backend::setGroupUid(name);
  // Torch names the group after the backend exists; use the name in messages from now on.
  if (!name.empty()) {
    groupName_ = name;
    works_->setGroupName(name);
  }
}

void ProcessGroupHier::setTimeout(std::chrono::milliseconds timeout) { timeoutMs_.store(timeout.count()); }

std::chrono::milliseconds ProcessGroupHier::timeoutOf(std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? std::chrono::milliseconds(timeoutMs_.load()) : requested;
}

c10d::ErrorType ProcessGroupHier::getError() {
  std::lock_guard<std::mutex> lock(failureMutex_);
  return failure_.empty() ? c10d::ErrorType::SUCCESS : c10d::ErrorType::COMM_ERROR;
}

std::string ProcessGroupHier::label(const char* op, uint64_t sequence) const {
  return std::string("hier: ") + op + " on group '" + groupName_ + "' (seq " + std::to_string(sequence) + ", rank " +
         std::to_string(rank_) + "/" + std::to_string(size_) + ")";
}

void ProcessGroupHier::invalid(const char* op, const std::string& what) const {
  TORCH_CHECK(false, label(op), ": ", what);
}

void ProcessGroupHier::checkUsable(const char* op) const {
  if (shutDown_.load()) invalid(op, "the group was shut down or aborted; create a new group to communicate again");
  std::lock_guard<std::mutex> lock(failureMutex_);
  if (!failure_.empty()) {
    C10_THROW_ERROR(DistBackendError, label(op) + ": the group is unusable after an earlier failure (" + failure_ +
                                          "); destroy it (dist.destroy_process_group) and create a new one");
  }
}

void ProcessGroupHier::checkTensor(const char* op, const at::Tensor& tensor) const {
  if (!tensor.defined()) invalid(op, "got an undefined tensor");
  if (tensor.is_sparse()) invalid(op, "sparse tensors are not supported; pass a dense tensor (tensor.to_dense())");
  if (tensor.device().is_cuda()) {
    // CUDA tensors reach this check only in builds without the CUDA path (the others route them away).
    invalid(op, "the tensor is on " + tensor.device().str() +
                    ", but this hier build carries CPU tensors only (built without CUDA); move it to the CPU, "
                    "or use init_process_group(backend='cpu:hier,cuda:nccl')");
  }
  if (!tensor.device().is_cpu()) {
    invalid(op, "tensors on device '" + tensor.device().str() + "' are not supported; hier carries CPU tensors");
  }
}

// ---- running collectives ------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::enqueue(c10d::OpType type, const char* op,
                                                         std::vector<at::Tensor> inputs,
                                                         std::vector<at::Tensor> outputs,
                                                         std::chrono::milliseconds timeout, bool asyncOp, Body body,
                                                         int root) {
  checkUsable(op);
  timeout = timeoutOf(timeout);
  const uint64_t sequence = sequence_++;
  std::vector<at::Tensor> held = inputs;
  held.insert(held.end(), outputs.begin(), outputs.end());
  auto row = addRow(sequence, false, op, inputs, outputs, root >= 0 ? "root " + std::to_string(root) : "");
  auto work = c10::make_intrusive<WorkHier>(rank_, type, sequence, label(op, sequence),
                                            (std::string("hier:") + op).c_str(), inputs, std::move(outputs),
                                            std::move(row));
  work->setAbortHandler([this] { abort(); });
  // UCX may hold the tensors' memory past the work's end (after a timeout): it keeps this.
  auto keepalive = std::make_shared<const std::vector<at::Tensor>>(std::move(held));
  executor_.submit(
      [this, work, op, sequence, timeout, keepalive, body = std::move(body)] {
        run(*work, op, sequence, timeout, keepalive, body);
      },
      /*mayRunHere=*/!asyncOp);
  return work;
}

registry::WorkTable::Row ProcessGroupHier::addRow(uint64_t sequence, bool pointToPoint, const char* op,
                                                  const std::vector<at::Tensor>& inputs,
                                                  const std::vector<at::Tensor>& outputs, std::string peers) {
  registry::WorkInfo info;
  info.sequence = sequence;
  info.pointToPoint = pointToPoint;
  info.op = op;
  const auto& typed = !inputs.empty() ? inputs : outputs;
  if (!typed.empty() && typed[0].defined()) info.dtype = std::string(c10::getDtypeNames(typed[0].scalar_type()).first);
  for (const auto& t : inputs) info.inputs.push_back(t.defined() ? t.sizes().vec() : std::vector<int64_t>{});
  for (const auto& t : outputs) info.outputs.push_back(t.defined() ? t.sizes().vec() : std::vector<int64_t>{});
  info.peers = std::move(peers);
  return works_->add(std::move(info));
}

void ProcessGroupHier::run(WorkHier& work, const char* op, uint64_t sequence, std::chrono::milliseconds timeout,
                           std::shared_ptr<const void> keepalive, const Body& body) {
  work.markStarted();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (!failure_.empty()) {
      error = backendError(label(op, sequence) + ": the group is unusable after an earlier failure (" + failure_ +
                           "); destroy it and create a new one");
    }
  }
  if (!error) {
    try {
      Running running(*communicator_, transportSequence_, timeout, std::move(keepalive));
      body(running);
    } catch (const transport::Error& failure) {
      error = explainFailure(op, sequence, failure, timeout);
    } catch (...) {
      error = std::current_exception();
    }
  }
  work.complete(error);
}

std::exception_ptr ProcessGroupHier::explainFailure(const char* op, uint64_t sequence, const transport::Error& error,
                                                    std::chrono::milliseconds timeout) {
  std::string message = label(op, sequence) + ": " + error.what();
  if (error.kind() == transport::ErrorKind::InvalidUsage) {
    // Refused before anything was sent: the group is fine.
    return std::make_exception_ptr(c10::Error({__func__, __FILE__, uint32_t(__LINE__)}, message));
  }
  if (error.kind() == transport::ErrorKind::Timeout || error.kind() == transport::ErrorKind::PeerFailure) {
    // Ask the others which of them reached this collective: every rank that fails here reports itself,
    // then waits a little for the reports of the rest.
    // Each report is the rank's own account of where it is (its work table's summary).
    std::vector<int> silent, failed;
    std::vector<std::pair<int, std::string>> reports;
    try {
      auto& store = bootstrap_->store();
      const std::string prefix = "hier/failed/" + std::to_string(sequence) + "/";
      const std::string mine = works_->summary();
      store.set(prefix + std::to_string(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
      auto grace = std::clamp(timeout / 4, std::chrono::milliseconds(200), std::chrono::milliseconds(2000));
      auto until = std::chrono::steady_clock::now() + grace;
      do {
        silent.clear();
        failed.clear();
        for (int r = 0; r < size_; ++r) {
          (store.check({prefix + std::to_string(r)}) ? failed : silent).push_back(r);
        }
        if (silent.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } while (std::chrono::steady_clock::now() < until);
      for (int r : failed) {
        auto report = store.get(prefix + std::to_string(r));
        reports.emplace_back(r, std::string(report.begin(), report.end()));
      }
      if (silent.empty()) {
        message += "; every rank reached this collective and failed in it";
      } else {
        message += "; no report within " + std::to_string(grace.count()) + " ms from rank" +
                   (silent.size() > 1 ? "s " : " ") + joinRanks(silent) +
                   " (not arrived at this collective, dead, or already done with its part), while rank" +
                   (failed.size() > 1 ? "s " : " ") + joinRanks(failed) + " failed in it";
      }
    } catch (const std::exception&) {
      // The store may have gone with the failed rank; the transport's account stands alone.
    }
    std::string dump = dumpWorkTable(sequence, reports, silent);
    if (!dump.empty()) message += "; this rank's work table and the others' reports are in " + dump + ".txt (and .json)";
  }
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (failure_.empty()) failure_ = std::string(op) + " seq " + std::to_string(sequence) + ": " + error.what();
  }
  // Whatever is still in flight on this group belongs to a broken exchange.
  communicator_->abort("the group failed in " + std::string(op) + " seq " + std::to_string(sequence));
  message += "; the group is unusable now: destroy it (dist.destroy_process_group) and create a new one";
  return backendError(message);
}

std::string ProcessGroupHier::dumpWorkTable(uint64_t sequence, const std::vector<std::pair<int, std::string>>& reports,
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
  const std::string stem = fileSafe(groupName_) + ".rank" + std::to_string(rank_) + ".seq" + std::to_string(sequence) +
                           ".pid" + std::to_string(getpid());
  std::string path = works_->writeDump(registry::dumpDirectory(), stem, text, json);
  hierLog(transport::LogLevel::Error, works_->text(text) +
                                          (path.empty() ? "(could not write it to " + registry::dumpDirectory() + ")"
                                                        : "(also in " + path + ".txt and .json)"));
  return path;
}

void ProcessGroupHier::warnUnwaited() const {
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
  TORCH_WARN("hier: group '", groupName_, "' (rank ", rank_, "/", size_, ") shut down with ",
             rows.size() + notKept, " operation(s) nobody waited for: ", list,
             ". Call wait() on every Work (or wait_tensor on a functional collective's output); an error in an ",
             "operation nobody waits for goes unnoticed");
}

// ---- point to point -----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::pointToPoint(c10d::OpType type, const char* op, at::Tensor& tensor,
                                                              int peer, int tag) {
  checkUsable(op);
  checkTensor(op, tensor);
  const bool sending = type == c10d::OpType::SEND;
  const bool anySource = type == c10d::OpType::RECVANYSOURCE;
  if (!anySource && (peer < 0 || peer >= size_)) {
    invalid(op, "peer rank " + std::to_string(peer) + " is outside the group's ranks 0.." + std::to_string(size_ - 1));
  }
  if (peer == rank_) invalid(op, "a rank cannot send to or receive from itself; copy the tensor instead");
  if (tag < 0 || uint32_t(tag) > transport::kMaxUserTag) {
    invalid(op, "tag " + std::to_string(tag) + " is outside 0.." + std::to_string(transport::kMaxUserTag));
  }
  if (!sending && !tensor.is_contiguous()) {
    invalid(op, "the receive tensor is not contiguous; receive into tensor.contiguous() and copy it back");
  }
  at::Tensor data = sending ? tensor.contiguous() : tensor;
  const uint64_t sequence = p2pSequence_++;
  std::string description = std::string("hier: ") + op + " on group '" + groupName_ + "' (p2p seq " +
                            std::to_string(sequence) + ", rank " + std::to_string(rank_) + "/" +
                            std::to_string(size_) + ", peer " + (anySource ? "any" : std::to_string(peer)) +
                            ", tag " + std::to_string(tag) + ")";
  auto row = addRow(sequence, true, op, {data}, {tensor}, anySource ? "any" : "peer " + std::to_string(peer));
  auto work = c10::make_intrusive<WorkHier>(rank_, type, sequence, description, (std::string("hier:") + op).c_str(),
                                            std::vector<at::Tensor>{data}, std::vector<at::Tensor>{tensor},
                                            std::move(row));
  work->setAbortHandler([this] { abort(); });
  const auto timeout = timeoutOf(c10d::kUnsetTimeout);

  // The work finishes when its request settles, noticed by the thread that waits for it or polls it
  // (no hand-off). Only when someone holds the work's future, which nobody may ever wait on, does the
  // completion thread finish it. The request's hook holds the work weakly; the work holds the request.
  struct Outcome {
    bool succeeded;
    transport::ErrorKind kind;
    std::string message;
    uint64_t senderTag;
  };
  auto finish = [anySource](WorkHier& w, const Outcome& outcome) {
    if (outcome.succeeded) {
      if (anySource) w.setSourceRank(int(transport::sourceOf(outcome.senderTag)));
      w.complete();
      return;
    }
    std::string why = outcome.kind == transport::ErrorKind::Timeout
                          ? "no matching message within the deadline"
                          : std::string(toString(outcome.kind)) + ": " + outcome.message;
    w.complete(backendError(w.description() + ": " + why));
  };
  auto outcomeOf = [](const transport::ucx::Request& r) {
    return Outcome{r.succeeded(), r.errorKind(), r.errorMessage(), r.senderTag()};
  };
  c10::weak_intrusive_ptr<WorkHier> weakWork(work);
  auto onSettled = [this, weakWork, finish, outcomeOf](const transport::ucx::Request& request) {
    auto w = weakWork.lock();
    if (!w || !w->futureWanted()) return;
    completions_.submit([w, finish, outcome = outcomeOf(request)] { finish(*w, outcome); }, /*mayRunHere=*/false);
  };

  transport::Communicator::Message message{
      anySource ? -1 : peer,
      data.data_ptr(),
      size_t(data.numel()) * data.element_size(),
      transport::MemoryType::Host,
      transport::makeTag(groupId(), true, uint32_t(tag), uint32_t(sending ? rank_ : std::max(peer, 0))),
      transport::Clock::now() + timeoutOf(c10d::kUnsetTimeout),
      std::make_shared<const at::Tensor>(data),
      onSettled};
  transport::RequestPtr request;
  try {
    request = sending ? communicator_->send(message)
                      : communicator_->receive(message, anySource ? transport::kMatchAnySource : transport::kMatchAll);
  } catch (const transport::Error& error) {
    work->complete(backendError(description + ": " + error.what()));
    return work;
  }
  work->markStarted();
  WorkHier* raw = work.get();
  // The driver must not keep UCX alive after the group is gone: a shut-down engine settles its requests.
  std::weak_ptr<transport::ucx::Engine> weakEngine = communicator_->sharedEngine();
  work->setDriver([raw, request, weakEngine, finish, outcomeOf](bool block) {
    if (auto engine = weakEngine.lock(); engine && block) engine->wait(request);
    if (request->done()) finish(*raw, outcomeOf(*request));
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
#ifdef HIER_WITH_CUDA
  if (tensors.size() == 1 && tensors[0].is_cuda()) return cuda()->send(tensors, dstRank, tag);
#endif
  if (tensors.size() != 1) invalid("send", "expects exactly one tensor, got " + std::to_string(tensors.size()));
  return pointToPoint(c10d::OpType::SEND, "send", tensors[0], dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
#ifdef HIER_WITH_CUDA
  if (tensors.size() == 1 && tensors[0].is_cuda()) return cuda()->recv(tensors, srcRank, tag);
#endif
  if (tensors.size() != 1) invalid("recv", "expects exactly one tensor, got " + std::to_string(tensors.size()));
  return pointToPoint(c10d::OpType::RECV, "recv", tensors[0], srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  if (tensors.size() != 1) invalid("recv", "expects exactly one tensor, got " + std::to_string(tensors.size()));
  return pointToPoint(c10d::OpType::RECVANYSOURCE, "recv", tensors[0], -1, tag);
}

// ---- CUDA ---------------------------------------------------------------------------------------

CudaPath* ProcessGroupHier::cuda() {
#ifdef HIER_WITH_CUDA
  std::lock_guard<std::mutex> lock(cudaMutex_);
  if (!cuda_) cuda_ = std::make_shared<CudaPath>(*this);
  return cuda_.get();
#else
  return nullptr;
#endif
}

// ---- shutting down ------------------------------------------------------------------------------

void ProcessGroupHier::abort() {
  if (shutDown_.exchange(true)) return;
#ifdef HIER_WITH_CUDA
  if (cuda_) cuda_->abort();
#endif
  {
    std::lock_guard<std::mutex> lock(failureMutex_);
    if (failure_.empty()) failure_ = "the group was aborted";
  }
  communicator_->abort("the group was aborted");
  executor_.drainAndStop();  // queued work fails fast now
  completions_.drainAndStop();
  communicator_.reset();  // the last group to go takes UCX's threads and endpoints with it
}

void ProcessGroupHier::shutdown() {
  if (shutDown_.exchange(true)) return;
  // Queued collectives run to completion (each within its deadline), then anything still outstanding,
  // such as a receive nobody sent to, is cancelled.
  executor_.drainAndStop();
  cuda_.reset();  // its watchdog, streams and NCCL communicators
  communicator_->abort("the group was shut down");
  completions_.drainAndStop();
  communicator_.reset();  // the last group to go takes UCX's threads and endpoints with it
  warnUnwaited();
}

}  // namespace hier
