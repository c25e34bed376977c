// ProcessGroupHier's life cycle, the path every CPU collective takes (enqueue), where a call's tensors
// are, and point-to-point. The collectives' validation and routing are in process_group_calls.cpp.
#include "plugin/process_group_hier.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>
#include <variant>

#include "plugin/coalesced_work.hpp"
#include "plugin/held_tensors.hpp"
#include "plugin/logging.hpp"
#include "plugin/profiling.hpp"
#ifdef HIER_WITH_CUDA
#include "plugin/cuda/cuda_path.hpp"
#endif
#include "plugin/store_bootstrap.hpp"
#include "plugin/window.hpp"
#include "registry/group_registry.hpp"
#include "transport/base/error.h"
#include "transport/base/settings.h"
#include "transport/base/tag.h"
#include "transport/group/point_to_point.h"

namespace hier {
namespace {

std::exception_ptr backendError(const std::string& message) {
  return std::make_exception_ptr(c10::DistBackendError({__func__, __FILE__, uint32_t(__LINE__)}, message));
}

// Ranks that share a process (threads as ranks, rank-local mode) need a UCX engine each.
std::string engineScope() {
  auto key = registry::rankKey();
  return key ? "thread-" + std::to_string(*key) : std::string();
}

// A reconfigure handle no other group object in the job has: host, process, and a count in the process.
// A random number too, as containers that share a host name may share pids.
std::string newReconfigureHandle() {
  static std::atomic<uint64_t> made{0};
  static const uint64_t nonce = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return "hier:" + std::string(host) + ":" + std::to_string(getpid()) + ":" + std::to_string(nonce) + ":" +
         std::to_string(made++);
}

}  // namespace

std::unique_ptr<GroupCore> ProcessGroupHier::makeCore(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                      const std::string& name, std::chrono::milliseconds timeout,
                                                      c10d::Store* idCounter, std::chrono::milliseconds idWait) {
  auto bootstrap = std::make_shared<StoreBootstrap>(store);
  const uint32_t groupId = drawGroupId(*store, rank, "hier/group_id", idWait, idCounter);
  return std::make_unique<GroupCore>(bootstrap, groupId, rank, size, name, timeout, engineScope());
}

ProcessGroupHier::ProcessGroupHier(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   c10::intrusive_ptr<Options> options,
                                   const c10::intrusive_ptr<c10d::Store>& idCounter)
    : c10d::Backend(rank, size),
      store_(store),
      idCounter_(idCounter ? idCounter : store),
      options_(std::move(options)),
      handle_(newReconfigureHandle()) {
  init();
  installLogSink();
  const std::string name = options_->group_name.empty() ? "default_pg" : options_->group_name;
  TORCH_CHECK(size > 0 && rank >= 0 && rank < size, "hier: cannot create group '", name, "': rank ", rank,
              " is not within a group of size ", size);
  try {
#ifdef HIER_WITH_CUDA
    noteGpuForNetworkDevices();
#endif
    core_ = makeCore(store, rank, size, name, options_->timeout, idCounter_.get(), options_->timeout);
  } catch (const transport::Error& error) {
    C10_THROW_ERROR(DistBackendError, "hier: cannot create group '" + name + "' (rank " + std::to_string(rank) + "/" +
                                          std::to_string(size) + "): " + error.what());
  }
  // The profiler's account of the group's members (torch's convention): evenly spaced global ranks as a
  // start and a stride, -1 when they are not evenly spaced.
  const auto& global = options_->global_ranks_in_group;
  if (!global.empty()) {
    globalRankStart_ = int(global[0]);
    globalRankStride_ = global.size() > 1 ? int(global[1]) - int(global[0]) : 1;
    for (size_t i = 1; i < global.size(); ++i) {
      if (int(global[i]) - int(global[i - 1]) != globalRankStride_) globalRankStart_ = globalRankStride_ = -1;
    }
  }
  std::string ranks;
  for (auto r : options_->global_ranks_in_group) {
    if (!ranks.empty()) ranks += ',';
    ranks += std::to_string(r);
  }
  hierLog(transport::LogLevel::Info, "group '" + name + "': rank " + std::to_string(rank) + " of " +
                                         std::to_string(size) + ", id " + std::to_string(groupId()) +
                                         (ranks.empty() ? "" : ", global ranks [" + ranks + "]"));
}

ProcessGroupHier::~ProcessGroupHier() { shutdown(); }

void ProcessGroupHier::setGroupUid(const std::string& name) {
  c10d::Backend::setGroupUid(name);
  // Torch names the group after the backend exists; use the name in messages from now on.
  core_->rename(name);
}

c10d::ErrorType ProcessGroupHier::getError() {
  return core_->failed() ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
}

ProcessGroupHier::On ProcessGroupHier::placement(const char* op, const std::vector<at::Tensor>& tensors) const {
  releaseDeferred();       // what hier's own threads let go of since the last call
  core_->checkUsable(op);  // a group shut down, aborted or failed takes nothing more
  const at::Tensor* first = nullptr;
  for (const auto& t : tensors) {
    if (!t.defined()) invalid(op, "got an undefined tensor");
    if (t.is_sparse()) invalid(op, "sparse tensors are not supported; pass a dense tensor (tensor.to_dense())");
    if (!t.device().is_cpu() && !t.device().is_cuda()) {
      invalid(op, "tensors on device '" + t.device().str() + "' are not supported; hier carries CPU and CUDA tensors");
    }
    if (first == nullptr) first = &t;
    if (t.device() != first->device()) {
      invalid(op, "all tensors of one call must be on one device, but found " + first->device().str() + " and " +
                      t.device().str() + "; move them to one device");
    }
  }
  if (first == nullptr || first->device().is_cpu()) return On::Cpu;
#ifndef HIER_WITH_CUDA
  invalid(op, "the tensor is on " + first->device().str() +
                  ", but this hier build carries CPU tensors only (built without CUDA); move it to the CPU, or use "
                  "init_process_group(backend='cpu:hier,cuda:nccl')");
#endif
  return On::Cuda;
}

c10::weak_intrusive_ptr<ProcessGroupHier> ProcessGroupHier::weakSelf() {
  return c10::weak_intrusive_ptr<ProcessGroupHier>(
      c10::intrusive_ptr<ProcessGroupHier>::unsafe_reclaim_from_nonowning(this));
}

WorkHier::AbortHandler ProcessGroupHier::abortHandler() {
  // Made once, on the first operation, then shared by every work. A work may outlive its group: it aborts
  // the group only while it lives.
  std::call_once(abortHandlerOnce_, [this] {
    auto self = weakSelf();
    abortHandler_ = std::make_shared<const std::function<void()>>([self] {
      if (auto group = self.lock()) group->abort();
    });
  });
  return abortHandler_;
}

std::optional<c10::Device> ProcessGroupHier::lastCudaDevice() {
#ifdef HIER_WITH_CUDA
  std::lock_guard<std::mutex> lock(cudaMutex_);
  if (cuda_) return cuda_->lastDevice();
#endif
  return std::nullopt;
}

CudaPath& ProcessGroupHier::cuda() {
#ifdef HIER_WITH_CUDA
  std::lock_guard<std::mutex> lock(cudaMutex_);
  if (!cuda_) {
    cuda_ = std::make_shared<CudaPath>(*core_, options_->is_high_priority_stream, [self = weakSelf()] {
      auto group = self.lock();
      return group ? group->profiledGroup() : ProfiledGroup{};
    });
    if (timing_) cuda_->enableTiming();
  }
  return *cuda_;
#else
  TORCH_CHECK(false, "hier: this build has no CUDA path");
#endif
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::enqueue(c10d::OpType type, const char* op,
                                                         c10::ArrayRef<at::Tensor> inputs,
                                                         std::vector<at::Tensor> outputs,
                                                         std::chrono::milliseconds timeout, bool asyncOp, Body body,
                                                         Terms terms, const std::string& peers) {
  const Issued operation = issue(*core_, op, timeout);
  const uint64_t sequence = operation.sequence;
  auto issueWork = [&](const char* profilingTitle) -> c10::intrusive_ptr<c10d::Work> {
    // A call that blocks runs right here when the executor is idle: it starts as it is issued, and its
    // task is never queued (nor copied).
    const Executor::Claim here = core_->claimExecutor(/*mayRunHere=*/!asyncOp);
    const auto issued = std::chrono::steady_clock::now();
    // What keeps the operation's tensors alive: its work until it completes, UCX until it lets go of
    // them (after a timeout), the run below until the operation ran. One allocation for a few tensors.
    auto held = std::make_shared<HeldTensors>();
    held->tensors.append(inputs.begin(), inputs.end());
    held->tensors.append(outputs.begin(), outputs.end());
    std::shared_ptr<const void> keepalive = std::move(held);
    auto row = core_->addRow(type, sequence, false, op, inputs, outputs, peers, issued, /*running=*/bool(here));
    auto work = c10::make_intrusive<WorkHier>(rank_, type, core_->operationName(op, sequence), profilingTitle, inputs,
                                              std::move(outputs), std::move(row), keepalive,
                                              here ? issued : std::chrono::steady_clock::time_point{});
    work->setAbortHandler(abortHandler());
    auto run = [this, work, operation, keepalive = std::move(keepalive), body = std::move(body),
                terms = std::move(terms)](std::chrono::steady_clock::time_point started) mutable {
      std::exception_ptr outcome =
          runOperation(*core_, operation, transport::Deadline::after(operation.timeout, started), std::move(keepalive),
                       &terms, body);
      body = nullptr;  // and what it holds, before the work completes (held_tensors.hpp)
      work->complete(std::move(outcome));
    };
    if (here) {
      run(issued);
      return work;
    }
    // Whoever waits for the work before the group's thread started it runs it itself, with whatever is
    // queued ahead of it (Executor::runNext). The work may outlive the group: it holds the group weakly,
    // and strongly only while it runs the group's operations.
    work->setDriver([self = weakSelf(), raw = work.get()](bool block) {
      if (!block) return;  // a poll (isCompleted, a future asked for) never runs an operation
      auto group = self.lock();
      if (!group) return;
      while (!raw->c10d::Work::isCompleted() && group->core_->runNextHere()) {
      }
    });
    core_->submit(
        [work, run = std::move(run)]() mutable {
          const auto started = std::chrono::steady_clock::now();
          work->markStarted(started);
          run(started);
        },
        /*mayRunHere=*/false);
    return work;
  };
  // For as long as it is issued here, as torch's own backends do.
  return profiled([this] { return profiledGroup(); }, sequence, op, inputs, outputs,
                  [&](bool profiling) { return issueWork(profiling ? profilingTitle(op) : nullptr); });
}

ProfiledGroup ProcessGroupHier::profiledGroup() const {
  return {core_->name(), getGroupDesc(), rank_, size_, globalRankStart_, globalRankStride_};
}

void ProcessGroupHier::refuse(c10d::OpType type, const char* op, std::chrono::milliseconds timeout,
                              const std::string& why) {
  if (!core_->usable()) return;  // no agreement to take part in
  try {
    auto work = enqueue(type, op, {}, {}, timeout, /*asyncOp=*/false, /*body=*/nullptr, Terms{{}, why});
    work->wait();
  } catch (const std::exception&) {
    // The peers did not take part within the deadline (the group says so from now on): the caller still
    // gets its own error.
  }
}

// ---- point to point -----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::pointToPoint(c10d::OpType type, const char* op, at::Tensor& tensor,
                                                              int peer, int tag) {
  const bool sending = type == c10d::OpType::SEND;
  const bool anySource = type == c10d::OpType::RECVANYSOURCE;
  const On on = placement(op, {tensor});
  if (!anySource && (peer < 0 || peer >= size_)) {
    invalid(op, "peer rank " + std::to_string(peer) + " is outside the group's ranks 0.." + std::to_string(size_ - 1));
  }
  if (peer == rank_) invalid(op, "a rank cannot send to or receive from itself; copy the tensor instead");
  if (tag < 0 || uint32_t(tag) > transport::kMaxUserTag) {
    invalid(op, "tag " + std::to_string(tag) + " is outside 0.." + std::to_string(transport::kMaxUserTag));
  }
#ifdef HIER_WITH_CUDA
  if (on == On::Cuda) {
    bool batching;
    {
      std::lock_guard<std::mutex> lock(coalescingMutex_);
      batching = coalescing_.has_value();
    }
    return sending ? cuda().send(tensor, peer, tag, batching)
                   : cuda().recv(tensor, anySource ? -1 : peer, tag, batching);
  }
#else
  (void)on;
#endif
  if (!sending && !tensor.is_contiguous()) {
    invalid(op, "the receive tensor is not contiguous; receive into tensor.contiguous() and copy it back");
  }
  const uint64_t sequence = core_->nextPointToPoint();
  return profiled([this] { return profiledGroup(); }, sequence, op, tensor, tensor,
                  [&](bool profiling) {
                    return postPointToPoint(type, op, tensor, peer, tag, sequence,
                                            profiling ? profilingTitle(op) : nullptr);
                  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::postPointToPoint(c10d::OpType type, const char* op, at::Tensor& tensor,
                                                                  int peer, int tag, uint64_t sequence,
                                                                  const char* profilingTitle) {
  const bool sending = type == c10d::OpType::SEND;
  const bool anySource = type == c10d::OpType::RECVANYSOURCE;
  at::Tensor data = sending ? tensor.contiguous() : tensor;
  OperationName name = core_->operationName(op, sequence);
  name.pointToPoint = true;
  name.peer = anySource ? -1 : peer;
  name.tag = tag;
  return postTransfer(type, std::move(name), {data}, {tensor}, c10d::kUnsetTimeout, profilingTitle,
                      [&](const transport::Deadline& deadline, std::shared_ptr<const void> keepalive,
                          std::function<void(const transport::TransferOutcome&)> onSettled) {
                        transport::PointToPoint message;
                        message.peer = anySource ? -1 : peer;
                        message.tag = uint32_t(tag);
                        message.data = data.data_ptr();
                        message.bytes = size_t(data.numel()) * data.element_size();
                        message.deadline = deadline;
                        message.keepalive = std::move(keepalive);
                        message.onSettled = std::move(onSettled);
                        auto& communicator = core_->transport()->communicator();
                        return sending ? transport::send(communicator, message)
                                       : transport::receive(communicator, message);
                      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::postTransfer(c10d::OpType type, OperationName name,
                                                              std::vector<at::Tensor> inputs,
                                                              std::vector<at::Tensor> outputs,
                                                              std::chrono::milliseconds timeout,
                                                              const char* profilingTitle, const PostTransfer& post) {
  const bool anySource = type == c10d::OpType::RECVANYSOURCE;
  const uint64_t sequence = name.sequence;
  const std::string peers = name.peer < 0 ? "any" : "peer " + std::to_string(name.peer);
  const char* op = name.op;
  const auto issued = std::chrono::steady_clock::now();
  auto row = core_->addRow(type, sequence, true, op, inputs, outputs, peers, issued);
  // UCX may hold the tensors' memory past the work's end (after a timeout): the transfer keeps this.
  auto held = std::make_shared<HeldTensors>();
  held->tensors = inputs;
  held->tensors.insert(held->tensors.end(), outputs.begin(), outputs.end());
  std::shared_ptr<const void> keepalive = std::move(held);
  auto work =
      c10::make_intrusive<WorkHier>(rank_, type, std::move(name), profilingTitle, c10::ArrayRef<at::Tensor>(inputs),
                                    std::move(outputs), std::move(row), keepalive);
  work->setAbortHandler(abortHandler());

  // The work finishes when its transfer settles, noticed by the thread that waits for it or polls it
  // (no hand-off). Only when someone holds the work's future, which nobody may ever wait on, does the
  // completion thread finish it. The transfer's hook holds the work weakly; the work holds the transfer.
  const bool receiving = anySource || type == c10d::OpType::RECV;
  auto finish = [anySource, receiving](WorkHier& w, const transport::TransferOutcome& outcome) {
    if (outcome.succeeded) {
      if (anySource) w.setSourceRank(outcome.source);
      w.complete();
      return;
    }
    if (outcome.kind == transport::ErrorKind::Timeout) {
      const std::string why = w.description() + (receiving ? ": no matching message within the deadline"
                                                           : ": not delivered within the deadline");
      return w.complete(std::make_exception_ptr(TimedOut({__func__, __FILE__, uint32_t(__LINE__)}, why)));
    }
    w.complete(backendError(w.description() + ": " + toString(outcome.kind) + ": " + outcome.message));
  };
  c10::weak_intrusive_ptr<WorkHier> weakWork(work);
  auto onSettled = [completions = core_->completions(), weakWork, finish](const transport::TransferOutcome& outcome) {
    auto w = weakWork.lock();
    if (!w || !w->futureWanted()) return;
    completions->submit([w, finish, outcome] { finish(*w, outcome); }, /*mayRunHere=*/false);
  };
  const auto deadline = transport::Deadline::after(core_->operationTimeout(timeout, /*pointToPoint=*/true, sequence));
  std::shared_ptr<transport::Transfer> transfer;
  try {
    transfer = post(deadline, std::move(keepalive), std::move(onSettled));
  } catch (const transport::Error& error) {
    work->complete(backendError(work->description() + ": " + error.what()));
    return work;
  }
  work->markStarted(issued);
  WorkHier* raw = work.get();
  work->setDriver([raw, transfer, finish](bool block) {
    if (block) transfer->wait();
    if (transfer->done()) finish(*raw, transfer->outcome());
  });
  return work;
}

#if HIER_TORCH_HAS_WINDOW
c10::intrusive_ptr<c10d::Window> ProcessGroupHier::new_window(const std::optional<at::Tensor>& tensor) {
  auto window = c10::make_intrusive<WindowHier>(c10::intrusive_ptr<ProcessGroupHier>::reclaim_copy(this));
  if (tensor.has_value()) window->tensor_register(*tensor);
  return window;
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  if (tensors.size() != 1) invalid("send", "expects exactly one tensor, got " + std::to_string(tensors.size()));
  return issued(pointToPoint(c10d::OpType::SEND, "send", tensors[0], dstRank, tag));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  if (tensors.size() != 1) invalid("recv", "expects exactly one tensor, got " + std::to_string(tensors.size()));
  return issued(pointToPoint(c10d::OpType::RECV, "recv", tensors[0], srcRank, tag));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  if (tensors.size() != 1) invalid("recv", "expects exactly one tensor, got " + std::to_string(tensors.size()));
  return issued(pointToPoint(c10d::OpType::RECVANYSOURCE, "recv", tensors[0], -1, tag));
}

// ---- coalescing and timing ----------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::issued(c10::intrusive_ptr<c10d::Work> work) {
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  if (coalescing_ && work) coalescing_->push_back(work);
  return work;
}

void ProcessGroupHier::registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) {
  core_->setCompletionHook(hook);
  // torch's hasHooks() reads it: destroy_process_group then waits for the hooks before the interpreter goes.
  onCompletionHook_ = std::move(hook);
}

#if HIER_TORCH_HAS_COMPLETION_HOOKS
void ProcessGroupHier::registerCompletionHook(int64_t id, c10d::CompletionHook hook) {
  TORCH_CHECK(hook, core_->label("register_completion_hook"), ": the hook is empty; pass a callable");
  core_->registerCompletionHook(id, [hook = std::move(hook)](uint64_t key, float durationMs) {
    c10d::CompletionHookArgs args;
    args.completionKey = key;
    args.duration_ms = durationMs;  // from its work-table row: started to seen finished, on the host
    hook(args);
  });
}
#endif

void ProcessGroupHier::waitForPendingWorks() {
  const transport::Deadline deadline = transport::Deadline::after(core_->timeoutOf(c10d::kUnsetTimeout));
  core_->awaitExecutor(deadline);  // every host operation and host stage issued so far ran
#ifdef HIER_WITH_CUDA
  if (auto cuda = cudaIfMade()) cuda->awaitDevice(deadline);
#endif
  core_->awaitCompletionHooks();
}

void ProcessGroupHier::startCoalescing() {
#ifdef HIER_WITH_CUDA
  // A batch left open by an exception: its point-to-point on CUDA tensors runs on its own too.
  if (auto cuda = cudaIfMade()) cuda->endBatch();
#endif
  std::lock_guard<std::mutex> lock(coalescingMutex_);
  if (coalescing_) {
    hierLog(transport::LogLevel::Warning,
            "start_coalescing on group '" + core_->name() + "' while coalescing: the open batch of " +
                std::to_string(coalescing_->size()) +
                " operations is dropped (they run and complete on their own); was an exception raised "
                "inside a coalescing block?");
  }
  coalescing_.emplace();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHier::endCoalescing() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  {
    std::lock_guard<std::mutex> lock(coalescingMutex_);
    if (!coalescing_) {
      C10_THROW_ERROR(ValueError, "hier: end_coalescing on group '" + core_->name() +
                                      "' without start_coalescing first; use torch.distributed's "
                                      "_coalescing_manager or batch_isend_irecv, which pair them");
    }
    works = std::move(*coalescing_);
    coalescing_.reset();
  }
#ifdef HIER_WITH_CUDA
  // The batch's point-to-point on CUDA tensors goes as one NCCL group now (CudaPath::endBatch).
  if (auto cuda = cudaIfMade()) cuda->endBatch();
#endif
  return c10::make_intrusive<CoalescedWork>(rank_, std::move(works));
}

void ProcessGroupHier::enableCollectivesTiming() {
  // CPU work is timed always (WorkHier::getDuration); CUDA work needs timed events, which cost.
  std::lock_guard<std::mutex> lock(cudaMutex_);
  timing_ = true;
#ifdef HIER_WITH_CUDA
  if (cuda_) cuda_->enableTiming();
#endif
}

// ---- shutting down ------------------------------------------------------------------------------

void ProcessGroupHier::abort() {
  std::shared_ptr<CudaPath> cuda = cudaIfMade();
#ifdef HIER_WITH_CUDA
  if (cuda) cuda->abort("the group was aborted");
#endif
  core_->abort();
}

void ProcessGroupHier::prepare(const char* op, bool hostMemory) {
  core_->checkUsable(op);
  try {
    if (hostMemory) core_->transport()->prepare(transport::Deadline::after(core_->timeoutOf(c10d::kUnsetTimeout)));
    core_->topology();
  } catch (const transport::Error& error) {
    C10_THROW_ERROR(DistBackendError, core_->label(op) + ": " + error.what());
  }
  prepared_.store(true);
}

void ProcessGroupHier::eagerConnectSingleDevice(at::Device device) {
  // On a GPU the records and the NCCL communicator: CUDA collectives never set up host shared memory.
  prepare("eager_connect_single_device", /*hostMemory=*/!device.is_cuda());
#ifdef HIER_WITH_CUDA
  if (device.is_cuda()) cuda().connect(device);
#endif
}

std::optional<int> ProcessGroupHier::findGlobal(uint64_t global) const {
  const auto& ranks = options_->global_ranks_in_group;
  if (ranks.empty()) return global < uint64_t(size_) ? std::optional<int>(int(global)) : std::nullopt;
  auto it = std::find(ranks.begin(), ranks.end(), global);
  return it == ranks.end() ? std::nullopt : std::optional<int>(int(it - ranks.begin()));
}

int ProcessGroupHier::rankOfGlobal(uint64_t global) const {
  const auto rank = findGlobal(global);
  TORCH_CHECK(rank, "hier: global rank ", global, " is not in group '", core_->name(), "'");
  return *rank;
}

std::shared_ptr<CudaPath> ProcessGroupHier::cudaIfMade() {
  std::lock_guard<std::mutex> lock(cudaMutex_);
  return cuda_;
}

std::shared_ptr<CudaPath> ProcessGroupHier::splittable(int device) {
#ifdef HIER_WITH_CUDA
  auto cuda = cudaIfMade();
  if (cuda && cuda->hasCommunicator(c10::Device(c10::kCUDA, c10::DeviceIndex(device)))) return cuda;
#else
  (void)device;
#endif
  return nullptr;
}

void ProcessGroupHier::splitCudaFrom(ProcessGroupHier& parent, int device) {
#ifdef HIER_WITH_CUDA
  auto from = parent.splittable(device);
  if (!from) return;  // every rank of the parent sees alike: its communicator is made by all or none
  std::vector<int> members;
  for (uint64_t global : options_->global_ranks_in_group) members.push_back(parent.rankOfGlobal(global));
  if (members.empty()) {
    for (int r = 0; r < size_; ++r) members.push_back(r);
  }
  const c10::Device where(c10::kCUDA, c10::DeviceIndex(device));
  if (auto comm = from->splitCommunicator(where, cuda_plan::splitOf(parent.core_->topology(), members))) {
    cuda().adoptCommunicator(where, std::move(comm));
  }
#else
  (void)parent;
  (void)device;
#endif
}

void ProcessGroupHier::start(ProcessGroupHier* parent) {
  if (parent != nullptr && parent != this) learnFrom(*parent);
  if (transport::settings().eagerInit) prepare("eager init (HIER_EAGER_INIT)", /*hostMemory=*/true);
}

void ProcessGroupHier::learnFrom(ProcessGroupHier& parent) {
  // A parent that failed may never learn them (its first collective may be what failed).
  if (size_ == 1 || parent.reconfigured_ || parent.core_->failed()) return;
  if (parent.core_->sequence() == 0 && !parent.prepared()) return;
  if (options_->global_ranks_in_group.empty()) return;
  std::vector<int> members;
  for (uint64_t global : options_->global_ranks_in_group) {
    const auto rank = parent.findGlobal(global);
    if (!rank) return;
    members.push_back(*rank);
  }
  try {
    core_->transport()->learnFrom(parent.core_->transport(), std::move(members));
  } catch (const transport::Error& error) {
    C10_THROW_ERROR(DistBackendError, core_->label("new_group") + ": " + error.what());
  }
}

void ProcessGroupHier::performNocolorSplit(int device) {
#ifdef HIER_WITH_CUDA
  if (auto from = splittable(device)) from->splitCommunicator(c10::Device(c10::kCUDA, c10::DeviceIndex(device)), {});
#else
  (void)device;
#endif
}

c10::intrusive_ptr<ProcessGroupHier::Options> ProcessGroupHier::childOptions(
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) const {
  auto options = c10::make_intrusive<Options>(options_->timeout, options_->is_high_priority_stream);
  if (opts) {
    options->timeout = opts->timeout;
    options->group_name = opts->group_name;
    if (auto* hierOptions = dynamic_cast<Options*>(opts.get())) {
      options->is_high_priority_stream = hierOptions->is_high_priority_stream;
    }
  }
  return options;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupHier::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                          const std::vector<int>& ranks,
                                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  const std::string& name = core_->name();
  for (int r : ranks) {
    TORCH_CHECK(r >= 0 && r < size_, "hier: split of group '", name, "': rank ", r, " is not in a group of size ",
                size_, "; pass ranks of this group");
  }
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
#ifdef HIER_WITH_CUDA
  // split_group on a group bound to a CUDA device: every rank passes its own child's members to
  // ncclCommSplit of this group's communicator there, where it has one.
  std::shared_ptr<transport::nccl::Communicator> comm;
  std::optional<c10::Device> bound = getBoundDeviceId();
  if (bound && bound->is_cuda()) {
    if (auto from = splittable(bound->index())) {
      comm = from->splitCommunicator(
          *bound, it == ranks.end() ? cuda_plan::SplitPlan{} : cuda_plan::splitOf(core_->topology(), ranks));
    }
  }
#endif
  if (it == ranks.end()) return nullptr;  // not in the child: torch leaves this rank out of it
  auto options = childOptions(opts);
  for (int r : ranks) {
    if (size_t(r) < options_->global_ranks_in_group.size()) {
      options->global_ranks_in_group.push_back(options_->global_ranks_in_group[size_t(r)]);
    }
  }
  const int newRank = int(it - ranks.begin());
  hierLog(transport::LogLevel::Info, "group '" + name + "': rank " + std::to_string(rank_) + " splits into '" +
                                         options->group_name + "' of " + std::to_string(ranks.size()) +
                                         " ranks, as rank " + std::to_string(newRank));
  auto child = c10::make_intrusive<ProcessGroupHier>(store, newRank, int(ranks.size()), options, idCounter_);
#ifdef HIER_WITH_CUDA
  if (comm) child->cuda().adoptCommunicator(*bound, std::move(comm));
#endif
  return child;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupHier::merge(const c10::intrusive_ptr<c10d::Store>& store,
                                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts,
                                                          const int& rank, const int& size) {
  const std::string& name = core_->name();
  TORCH_CHECK(store, "hier: merge of group '", name, "': no store; pass the store every member of the merged group ",
              "shares");
  TORCH_CHECK(size > 0 && rank >= 0 && rank < size, "hier: merge of group '", name, "': rank ", rank,
              " is not within a merged group of size ", size, "; is more than `size` ranks using the store?");
  auto options = childOptions(opts);
  hierLog(transport::LogLevel::Info, "group '" + name + "': rank " + std::to_string(rank_) + " merges into '" +
                                         options->group_name + "' of " + std::to_string(size) + " ranks, as rank " +
                                         std::to_string(rank));
  // The id comes from this job's counter, not from the given store's: that store may be new, its counter
  // starting again at ids this job's groups hold. The merged group's own children count there too.
  return c10::make_intrusive<ProcessGroupHier>(store->clone(), rank, size, options, idCounter_);
}

#if HIER_TORCH_HAS_RECONFIGURE
c10::intrusive_ptr<c10d::Work> ProcessGroupHier::reconfigure(const c10d::ReconfigureOptions& opts) {
  const std::string name = core_->name();
  const std::string label = "hier: reconfigure of group '" + name + "'";
  std::vector<std::string> members;
  if (const auto* ordered = std::get_if<std::vector<c10d::ReconfigureHandle>>(&opts.handles)) {
    members = *ordered;
  } else {
    const auto& unordered = std::get<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles);
    members.assign(unordered.begin(), unordered.end());
    std::sort(members.begin(), members.end());  // every rank numbers a set alike
  }
  TORCH_CHECK(!members.empty(), label, ": no handles given; pass every member's get_reconfigure_handle(), this ",
              "rank's included");
  std::string joined;
  for (size_t i = 0; i < members.size(); ++i) {
    TORCH_CHECK(members[i].rfind("hier:", 0) == 0, label, ": '", members[i],
                "' is not a hier group's handle; pass what get_reconfigure_handle() of each member's hier group "
                "returned");
    TORCH_CHECK(std::find(members.begin(), members.begin() + i, members[i]) == members.begin() + i, label, ": handle '",
                members[i], "' is listed twice; list each member once");
    joined += members[i] + "\n";
  }
  auto mine = std::find(members.begin(), members.end(), handle_);
  TORCH_CHECK(mine != members.end(), label, ": this rank's handle '", handle_, "' is not among the ", members.size(),
              " given; only the ranks listed call reconfigure, each with the same list");
  TORCH_CHECK(!reconfiguredWith_.count(opts.uuid), label, ": uuid ", opts.uuid,
              " was used before by this group; pass a fresh uuid for every reconfigure");
  // Used from here on, even if this call fails: its keys stay in the store, and a retry must not meet them.
  reconfiguredWith_.insert(opts.uuid);
  const int newRank = int(mine - members.begin());
  const int newSize = int(members.size());
  // opts.timeout bounds the reconfiguration; the group's operations keep the group's timeout.
  const std::chrono::milliseconds timeout = opts.timeout.value_or(options_->timeout);
  // The members meet under the uuid. The new rank 0 claims it for this member list first: a uuid used
  // before, by other ranks, is refused there, and a rank given another list finds out below.
  auto store = c10::make_intrusive<c10d::PrefixStore>("hier/reconfigure/" + std::to_string(opts.uuid), store_);
  const std::vector<uint8_t> claim(joined.begin(), joined.end());
  if (newRank == 0) {
    TORCH_CHECK(store->compareSet("claimed", {}, claim) == claim, label, ": uuid ", opts.uuid,
                " was used by an earlier reconfigure; pass a fresh uuid for every reconfigure");
  }
  std::unique_ptr<GroupCore> fresh;
  try {
    // Its id from the job's counter, as every group's; waits for the new rank 0, which claimed first.
    fresh = makeCore(store, newRank, newSize, name, core_->timeoutOf(c10d::kUnsetTimeout), idCounter_.get(), timeout);
  } catch (const transport::Error& error) {
    C10_THROW_ERROR(DistBackendError,
                    label + " (rank " + std::to_string(newRank) + "/" + std::to_string(newSize) + "): " + error.what());
  }
  TORCH_CHECK(store->get("claimed") == claim, label, ": the new rank 0 was given another list of handles ",
              "than this rank; pass every member the same list");
  // No member lets its old group go before all have come: one that does not within the timeout fails the
  // call on every rank, and each keeps its old group.
  store->add("arrived", 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (int64_t arrived = store->add("arrived", 0); arrived < newSize; arrived = store->add("arrived", 0)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      C10_THROW_ERROR(DistBackendError, label + ": " + std::to_string(arrived) + " of the " + std::to_string(newSize) +
                                            " members arrived within " + std::to_string(timeout.count()) +
                                            " ms; the others did not call reconfigure with uuid " +
                                            std::to_string(opts.uuid) +
                                            ", or ended. The group keeps its members; retry with a fresh uuid");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  fresh->takeHooksFrom(*core_);
  // The old members' group goes: what it has in flight fails now, its connections close.
  std::shared_ptr<CudaPath> cuda;
  {
    std::lock_guard<std::mutex> lock(cudaMutex_);
    cuda = std::exchange(cuda_, nullptr);
  }
#ifdef HIER_WITH_CUDA
  if (cuda) {
    cuda->abort("the group was reconfigured");
    cuda->close();
  }
#endif
  core_->retire("the group was reconfigured (dist._reconfigure, uuid " + std::to_string(opts.uuid) + ")");
  core_->close();
  if (cuda) retiredCuda_.push_back(std::move(cuda));
  retiredCores_.push_back(std::exchange(core_, std::move(fresh)));
  hierLog(transport::LogLevel::Info, "group '" + name + "': rank " + std::to_string(rank_) + " of " +
                                         std::to_string(size_) + " is rank " + std::to_string(newRank) + " of " +
                                         std::to_string(newSize) + " after reconfigure " + std::to_string(opts.uuid) +
                                         ", id " + std::to_string(groupId()));
  rank_ = newRank;
  size_ = newSize;
  shrinks_ = 0;                             // shrinks meet under the new group's id (shrink)
  options_->global_ranks_in_group.clear();  // its members' global ranks are the caller's business now
  reconfigured_ = true;                     // so groups made from now on cannot map theirs onto it
  prepared_.store(false);                   // the fresh core is not
  globalRankStart_ = 0;
  globalRankStride_ = 1;
  auto future = makeResultFuture();
  future->markCompleted(c10::IValue(std::vector<at::Tensor>{}));
  return c10d::Work::create_from_future(future);
}
#endif

c10::intrusive_ptr<c10d::Backend> ProcessGroupHier::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride) {
  const std::string& name = core_->name();
  std::vector<bool> excluded(size_, false);
  for (int64_t r : ranksToExclude) {
    TORCH_CHECK(r >= 0 && r < size_, "hier: shrink of group '", name, "': rank ", r, " is not in a group of size ",
                size_, "; pass ranks of this group");
    excluded[r] = true;
  }
  TORCH_CHECK(!excluded[rank_], "hier: shrink of group '", name, "': rank ", rank_,
              " is excluded and must not take part; only the ranks that stay call shrink_group");
  int newRank = 0, newSize = 0;
  std::string survivors;
  auto options = c10::make_intrusive<Options>(options_->timeout, options_->is_high_priority_stream);
  if (auto* hierOptions = dynamic_cast<Options*>(optsOverride.get())) {
    options->timeout = hierOptions->timeout;
    options->is_high_priority_stream = hierOptions->is_high_priority_stream;
  }
  for (int r = 0; r < size_; ++r) {
    if (excluded[r]) continue;
    if (r == rank_) newRank = newSize;
    ++newSize;
    if (!survivors.empty()) survivors += ',';
    survivors += std::to_string(r);
    if (size_t(r) < options_->global_ranks_in_group.size()) {
      options->global_ranks_in_group.push_back(options_->global_ranks_in_group[r]);
    }
  }
  TORCH_CHECK(newSize > 0, "hier: shrink of group '", name, "': every rank is excluded");
  options->group_name = name + ":shrunk";
  // torch's SHRINK_ABORT: what this group still has in flight fails now instead of at its deadline.
  if (shrinkFlags & 0x01) abort();
  // The survivors meet under a prefix of their own: this group's n-th shrink to exactly these ranks.
  auto store = c10::make_intrusive<c10d::PrefixStore>(
      "hier/shrink/" + std::to_string(groupId()) + "/" + std::to_string(shrinks_++) + "/" + survivors, store_);
  hierLog(transport::LogLevel::Info, "group '" + name + "': rank " + std::to_string(rank_) + " shrinks to ranks [" +
                                         survivors + "] of " + std::to_string(size_) + ", as rank " +
                                         std::to_string(newRank));
  return c10::make_intrusive<ProcessGroupHier>(store, newRank, newSize, options, idCounter_);
}

void ProcessGroupHier::shutdown() {
  if (!core_) return;
  // Queued collectives run to completion (each within its deadline); then the CUDA path lets the device
  // finish and closes NCCL; then whatever is still outstanding, such as a receive nobody sent to, is
  // cancelled.
  core_->drain();
  std::shared_ptr<CudaPath> cuda = cudaIfMade();
#ifdef HIER_WITH_CUDA
  if (cuda) cuda->close();
#endif
  core_->close();
  releaseDeferred();
}

}  // namespace hier
