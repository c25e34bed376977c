#include "plugin/cuda/cuda_path.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <future>
#include <mutex>

#include "plugin/cuda/stream_leases.hpp"
#include "plugin/held_tensors.hpp"
#include "plugin/logging.hpp"
#include "plugin/work.hpp"
#include "transport/base/poll.h"
#include "transport/base/prefix_bootstrap.h"
#include "transport/nccl/device_node_steps.h"
#include "transport/nccl/stream_gate.h"
#include "transport/ucx/cuda_direct.h"
#include "transport/ucx/net_devices.h"

namespace hier {
namespace {

// The caching allocator must not hand a tensor's memory out again while `stream` still uses it.
void recordOn(const std::vector<at::Tensor>& tensors, const c10::cuda::CUDAStream& stream) {
  for (const auto& t : tensors) {
    if (t.defined() && t.is_cuda() && t.storage().data_ptr().get() != nullptr) {
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
    }
  }
}

at::Tensor pinnedLike(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
}

bool capturing(const c10::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

c10::Device deviceOf(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  for (const auto* list : {&inputs, &outputs}) {
    for (const auto& t : *list) {
      if (t.defined()) return t.device();
    }
  }
  return c10::Device(c10::kCUDA, c10::cuda::current_device());
}

// Memory for a schedule's node steps and staging, held with the operation's tensors until the device
// passed its end.
transport::nccl::DeviceNodeSteps::Allocate allocatorFor(const std::shared_ptr<HeldTensors>& holds,
                                                        const c10::Device& where) {
  return [holds, where](size_t bytes, transport::MemoryType memory) -> void* {
    auto options = at::TensorOptions().dtype(at::kByte);
    at::Tensor t = memory == transport::MemoryType::Host ? at::empty({int64_t(bytes)}, options.pinned_memory(true))
                                                         : at::empty({int64_t(bytes)}, options.device(where));
    holds->tensors.push_back(t);
    return t.data_ptr();
  };
}

// The process's streams for groups (stream_leases.hpp).
cuda_plan::StreamLeases<cudaStream_t>& streamLeases() {
  static cuda_plan::StreamLeases<cudaStream_t> leases;
  return leases;
}

c10::cuda::CUDAStream leaseStream(c10::DeviceIndex index, int priority) {
  cudaStream_t raw = streamLeases().acquire(index, priority, [&] {
    cudaStream_t made = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithPriority(&made, cudaStreamNonBlocking, priority));
    return made;
  });
  return c10::cuda::getStreamFromExternal(raw, index);
}

std::shared_ptr<HeldTensors> holding(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  auto holds = std::make_shared<HeldTensors>();
  holds->tensors.append(inputs.begin(), inputs.end());
  holds->tensors.append(outputs.begin(), outputs.end());
  return holds;
}

}  // namespace

void noteGpuForNetworkDevices() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int visible = c10::cuda::device_count();
    const int gpu = cuda_plan::networkDeviceGpu(visible > 0 ? c10::cuda::current_device() : 0, visible,
                                                transport::ucx::launcherLocalRank());
    char busId[32] = {};
    if (gpu >= 0 && cudaDeviceGetPCIBusId(busId, sizeof busId, gpu) == cudaSuccess) {
      transport::ucx::setGpuBusId(busId);
    }
  });
}

CudaPath::CudaPath(GroupCore& core, bool highPriority, std::function<ProfiledGroup()> describe)
    : core_(core),
      highPriority_(highPriority),
      describe_(std::move(describe)),
      watchdog_(std::make_unique<Watchdog>(
          [this] { return asyncError(); },
          [this](const Watchdog::Watched* watched, const transport::Error& error) { deviceFailed(watched, error); })),
      sends_("hier-cuda-send") {}

CudaPath::~CudaPath() {
  close();
  // The streams go back for later groups, with whatever the device has left on them.
  for (auto& [index, d] : devices_) {
    streamLeases().release(index, d.priority, d.stream.stream());
    streamLeases().release(index, d.priority, d.p2p.stream());
    for (auto& [peer, stream] : d.receivesFrom) streamLeases().release(index, d.priority, stream.stream());
  }
}

// ---- devices, streams, communicators ------------------------------------------------------------

std::optional<c10::Device> CudaPath::lastDevice() const {
  const int index = lastDevice_.load();
  if (index < 0) return std::nullopt;
  return c10::Device(c10::kCUDA, c10::DeviceIndex(index));
}

CudaPath::Device& CudaPath::device(const c10::Device& where) {
  lastDevice_.store(where.index());
  std::lock_guard<std::mutex> lock(devicesMutex_);
  auto it = devices_.find(where.index());
  if (it != devices_.end()) return it->second;
  c10::cuda::CUDAGuard onDevice(where);
  int least = 0, greatest = 0;
  C10_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const int priority = cuda_plan::streamPriority(highPriority_, least, greatest);
  auto stream = leaseStream(where.index(), priority);
  auto p2p = leaseStream(where.index(), priority);
  return devices_.emplace(where.index(), Device{stream, p2p, {}, priority, nullptr}).first->second;
}

c10::cuda::CUDAStream CudaPath::receiveStream(const c10::Device& where, int peer) {
  Device& d = device(where);
  std::lock_guard<std::mutex> lock(devicesMutex_);
  auto it = d.receivesFrom.find(peer);
  if (it == d.receivesFrom.end()) it = d.receivesFrom.emplace(peer, leaseStream(where.index(), d.priority)).first;
  return it->second;
}

transport::nccl::Communicator& CudaPath::communicator(const c10::Device& where, std::chrono::milliseconds timeout) {
  Device& d = device(where);
  std::unique_lock<std::mutex> lock(devicesMutex_);
  devicesChanged_.wait(lock, [&] { return !d.making; });
  if (d.nccl) return *d.nccl;
  if (aborted_) throw transport::Error(transport::ErrorKind::Aborted, "NCCL was aborted on this group");
  d.making = true;
  const int ordinal = madeCommunicators_++;
  lock.unlock();

  std::shared_ptr<transport::nccl::Communicator> made;
  auto settle = [&](std::shared_ptr<transport::nccl::Communicator> ready) {
    std::lock_guard<std::mutex> relock(devicesMutex_);
    std::erase(pending_, made);
    d.nccl = std::move(ready);
    d.making = false;
    devicesChanged_.notify_all();
  };
  try {
    // A collective step of the communicator's members; no lock held, so abort() is never kept waiting.
    const auto plan = cuda_plan::ncclCommunicator(topology(), ordinal);
    const transport::Deadline deadline = transport::Deadline::after(timeout);
    transport::PrefixBootstrap bootstrap(core_.bootstrap(), plan.key);
    made = std::make_shared<transport::nccl::Communicator>(bootstrap, plan.rank, plan.size, where.index(), deadline);
    {
      std::lock_guard<std::mutex> relock(devicesMutex_);
      pending_.push_back(made);
      if (aborted_) made->abort();
    }
    made->awaitReady(deadline);
    hierLog(transport::LogLevel::Info, "'" + core_.name() + "': NCCL " + transport::nccl::version() + " communicator " +
                                           plan.key + " ready, rank " + std::to_string(plan.rank) + " of " +
                                           std::to_string(plan.size) + " on " + where.str());
  } catch (...) {
    settle(nullptr);
    throw;
  }
  settle(made);
  return *made;
}

void CudaPath::connect(const c10::Device& where) {
  try {
    c10::cuda::CUDAGuard onDevice(where);
    communicator(where, core_.timeoutOf(c10d::kUnsetTimeout));
  } catch (const transport::Error& error) {
    C10_THROW_ERROR(DistBackendError,
                    core_.label("eager_connect_single_device") + ": NCCL on " + where.str() + ": " + error.what());
  }
}

bool CudaPath::hasCommunicator(const c10::Device& where) {
  std::lock_guard<std::mutex> lock(devicesMutex_);
  auto it = devices_.find(where.index());
  return it != devices_.end() && it->second.nccl && !it->second.nccl->aborted();
}

std::shared_ptr<transport::nccl::Communicator> CudaPath::splitCommunicator(const c10::Device& where,
                                                                           const cuda_plan::SplitPlan& plan) {
  std::shared_ptr<transport::nccl::Communicator> parent;
  {
    std::lock_guard<std::mutex> lock(devicesMutex_);
    auto it = devices_.find(where.index());
    if (it == devices_.end() || !it->second.nccl) return nullptr;
    parent = it->second.nccl;
  }
  const transport::Deadline deadline = transport::Deadline::after(core_.timeoutOf(c10d::kUnsetTimeout));
  try {
    std::unique_ptr<transport::nccl::Communicator> child = parent->split(plan.color, plan.key, plan.size, deadline);
    if (child) {
      hierLog(transport::LogLevel::Info, "'" + core_.name() + "': NCCL communicator split for a child group, rank " +
                                             std::to_string(plan.key) + " of " + std::to_string(plan.size) + " on " +
                                             where.str());
    }
    return child;
  } catch (const transport::Error& error) {
    C10_THROW_ERROR(DistBackendError, "hier: splitting group '" + core_.name() + "''s NCCL communicator on " +
                                          where.str() + " for a new group: " + error.what());
  }
}

void CudaPath::adoptCommunicator(const c10::Device& where, std::shared_ptr<transport::nccl::Communicator> comm) {
  Device& d = device(where);
  std::lock_guard<std::mutex> lock(devicesMutex_);
  TORCH_CHECK(!d.nccl && !d.making, "hier: group '", core_.name(), "' already has a NCCL communicator on ",
              where.str());
  d.nccl = std::move(comm);
  ++madeCommunicators_;  // the next device's communicator takes the next ordinal, as if made here
}

void CudaPath::drain(const c10::Device& where) {
  c10::cuda::CUDAGuard onDevice(where);
  const transport::Deadline deadline = transport::Deadline::after(core_.timeoutOf(c10d::kUnsetTimeout));
  for (const auto& stream : {c10::cuda::getCurrentCUDAStream(where.index()), device(where).stream}) {
    c10::cuda::CUDAEvent passed(cudaEventDisableTiming);
    passed.record(stream);
    try {
      transport::pollUntil([&] { return passed.query(); }, deadline, [this] { return givingUp(); },
                           "waiting for the work queued on " + where.str());
    } catch (const transport::Error& error) {
      C10_THROW_ERROR(DistBackendError, core_.label("barrier") + ": " + error.what());
    }
  }
}

std::vector<std::shared_ptr<transport::nccl::Communicator>> CudaPath::communicators() {
  std::lock_guard<std::mutex> lock(devicesMutex_);
  std::vector<std::shared_ptr<transport::nccl::Communicator>> all = pending_;
  for (auto& [index, d] : devices_) {
    if (d.nccl) all.push_back(d.nccl);
  }
  return all;
}

c10::cuda::CUDAStream CudaPath::streamFor(const c10::Device& where, bool asyncOp, const std::vector<at::Tensor>& inputs,
                                          const std::vector<at::Tensor>& outputs) {
  auto current = c10::cuda::getCurrentCUDAStream(where.index());
  if (!asyncOp) return current;
  // Asynchronous calls run on the communication stream, after what the caller enqueued so far.
  c10::cuda::CUDAStream stream = device(where).stream;
  c10::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(stream);
  recordOn(inputs, stream);
  recordOn(outputs, stream);
  return stream;
}

c10::intrusive_ptr<CudaWork> CudaPath::makeWork(const Call& call, uint64_t sequence,
                                                const std::vector<at::Tensor>& inputs,
                                                const std::vector<at::Tensor>& outputs, const c10::Device& where,
                                                bool blocking) {
  // The profiler's event spans the work's making: what the caller's thread does is enqueue.
  auto work = profiled(describe_, sequence, call.op, inputs, outputs, [&](bool profiling) {
    return c10::make_intrusive<CudaWork>(
        core_.rank(), call.type, sequence, core_.label(call.op, sequence),
        profiling ? profilingTitle(call.op) : nullptr, inputs, outputs, where, blocking,
        core_.addRow(call.type, sequence, false, call.op, inputs, outputs, call.peers));
  });
  work->setAbortHandler([self = weak_from_this()] {
    if (auto path = self.lock()) path->abort("a work was aborted");
  });
  return work;
}

void CudaPath::startTimer(CudaWork& work, const c10::cuda::CUDAStream& stream) {
  if (timing_.load() && !capturing(stream)) work.startTimer(stream);
}

void CudaPath::watch(const c10::cuda::CUDAStream& stream, const c10::intrusive_ptr<CudaWork>& work, const char* op,
                     std::chrono::milliseconds timeout, std::shared_ptr<const void> holds) {
  watch(endOf(stream), work, op, timeout, std::move(holds));
}

std::shared_ptr<c10::cuda::CUDAEvent> CudaPath::endOf(const c10::cuda::CUDAStream& stream) {
  auto end = std::make_shared<c10::cuda::CUDAEvent>(cudaEventDisableTiming | cudaEventBlockingSync);
  end->record(stream);
  return end;
}

void CudaPath::watch(std::shared_ptr<c10::cuda::CUDAEvent> end, const c10::intrusive_ptr<CudaWork>& work,
                     const char* op, std::chrono::milliseconds timeout, std::shared_ptr<const void> holds) {
  watchdog_->watch({work, op, transport::Deadline::after(timeout), std::move(holds), std::move(end)});
}

FailureHooks CudaPath::failureHooks() {
  return FailureHooks{[this](const Issued& issued, const transport::Error& error) {
                        return fail(issued.op, issued.sequence, error, issued.timeout);
                      },
                      // Node peers may wait in NCCL calls this rank skipped.
                      [this](const Issued& issued) { abort(std::string(issued.op) + " failed part-way"); }};
}

// ---- the three roads -----------------------------------------------------------------------------

std::exception_ptr CudaPath::agreeNow(const Issued& operation, const Terms& terms,
                                      const transport::Deadline& deadline) {
  // The agreement is a collective of the group's transport: in turn on the executor (here when it is
  // idle). The caller waits for it, so that what it enqueues after comes in its program order.
  std::promise<std::exception_ptr> agreed;
  auto answer = agreed.get_future();
  core_.submit([&] { agreed.set_value(runOperation(core_, operation, deadline, nullptr, &terms, nullptr)); },
               /*mayRunHere=*/true);
  return answer.get();
}

CudaPath::DeviceTensors::DeviceTensors(const std::vector<at::Tensor>& callInputs,
                                       const std::vector<at::Tensor>& callOutputs, bool inPlace, bool separate) {
  auto sharesMemory = [&](const at::Tensor& output) {
    for (const auto& input : callInputs) {
      if (input.defined() && output.defined() && input.storage().is_alias_of(output.storage())) return true;
    }
    return false;
  };
  for (const auto& t : callInputs) {
    inputs.push_back(!t.defined() || t.is_contiguous() ? t : t.contiguous());
    if (!inputs.back().is_same(t)) copies.push_back(inputs.back());
  }
  for (size_t i = 0; i < callOutputs.size(); ++i) {
    const at::Tensor& t = callOutputs[i];
    at::Tensor written = t;
    if (inPlace) {
      written = inputs.at(i);
    } else if (t.defined() && (!t.is_contiguous() || (separate && sharesMemory(t)))) {
      written = at::empty_like(t, at::MemoryFormat::Contiguous);
      copies.push_back(written);
    }
    if (!written.is_same(t)) copiedBack.emplace_back(written, t);
    outputs.push_back(written);
  }
}

void CudaPath::DeviceTensors::copyBack(const c10::cuda::CUDAStream& stream) const {
  if (copiedBack.empty()) return;
  c10::cuda::CUDAStreamGuard onStream(stream);
  for (const auto& [written, output] : copiedBack) output.copy_(written, /*non_blocking=*/true);
}

CudaPath::Work CudaPath::onNccl(const Call& call, const std::vector<at::Tensor>& inputs,
                                const std::vector<at::Tensor>& outputs, const DeviceTensors& device,
                                const Enqueue& enqueue) {
  const Issued operation = issue(core_, call.op, call.timeout);
  const c10::Device where = deviceOf(inputs, outputs);
  auto work = makeWork(call, operation.sequence, inputs, outputs, where, call.type == c10d::OpType::BARRIER);
  c10::cuda::CUDAGuard guard(where);
  auto stream = streamFor(where, call.asyncOp, inputs, outputs);
  startTimer(*work, stream);
  const transport::Deadline deadline = transport::Deadline::after(operation.timeout);
  if (call.terms) {
    if (auto refused = agreeNow(operation, *call.terms, deadline)) {
      work->failed(refused);
      return work;
    }
  }
  // Enqueued right here, in the caller's program order, whatever the executor has queued: the stream
  // orders it after the group's earlier operations, and no NCCL call of any group is issued from
  // another thread. It takes no part in a recovery: NCCL's failures are for good (cuda_plan::failsGroup).
  const bool captured = capturing(stream);
  auto holds = holding(inputs, outputs);
  holds->tensors.append(device.copies.begin(), device.copies.end());
  recordOn(device.copies, stream);
  bool reachedStream = false;
  try {
    transport::nccl::Communicator& nccl = communicator(where, operation.timeout);
    reachedStream = true;  // from here on the stream may hold its tensors
    enqueue(stream.stream(), nccl, deadline);
    device.copyBack(stream);
    work->enqueued(stream);
  } catch (const transport::Error& error) {
    work->failed(fail(operation.op, operation.sequence, error, operation.timeout));
  } catch (const std::exception& local) {
    // Part-way: node peers may wait in NCCL calls this rank skipped.
    core_.broke(operation.op, operation.sequence, local.what());
    abort(std::string(operation.op) + " failed part-way");
    work->failed(std::current_exception());
  }
  // Under capture nothing runs before the graph replays: the operation is over as far as it goes.
  if (captured) {
    work->finished();
    return work;
  }
  if (!reachedStream) return work;
  try {
    // Failed or not, the device may use the tensors until the stream passes this point.
    watch(stream, work, operation.op, operation.timeout, holds);
  } catch (...) {
    work->failed(std::current_exception());
  }
  return work;
}

CudaPath::Work CudaPath::acrossHosts(const Call& call, const std::vector<at::Tensor>& inputs,
                                     const std::vector<at::Tensor>& outputs, const DeviceTensors& device,
                                     Schedule schedule) {
  using Pass = transport::hierarchy::NodeSteps::Pass;
  const Issued operation = issue(core_, call.op, call.timeout);
  const c10::Device where = deviceOf(inputs, outputs);
  auto work = makeWork(call, operation.sequence, inputs, outputs, where);
  const transport::Deadline deadline = transport::Deadline::after(operation.timeout);
  if (call.terms) {
    if (auto refused = agreeNow(operation, *call.terms, deadline)) {
      work->failed(refused);
      return work;
    }
  }
  transport::nccl::Communicator* node = nullptr;
  try {
    node = &communicator(where, operation.timeout);
  } catch (const transport::Error& error) {
    work->failed(fail(call.op, operation.sequence, error, operation.timeout));
    return work;
  }
  c10::cuda::CUDAGuard guard(where);
  auto stream = streamFor(where, call.asyncOp, inputs, outputs);
  if (capturing(stream)) {
    core_.invalid(call.op,
                  "cannot be captured in a CUDA graph on a group that spans hosts: its network steps run "
                  "on the host; capture collectives of groups on one host only");
  }
  startTimer(*work, stream);
  auto holds = holding(inputs, outputs);
  holds->tensors.append(device.copies.begin(), device.copies.end());
  recordOn(device.copies, stream);
  // Each rank chooses for itself: UCX matches a device buffer's message with a host one.
  const bool direct = transport::ucx::cudaDirectForThisProcess().direct;
  auto steps = std::make_shared<transport::nccl::DeviceNodeSteps>(*node, stream.stream(), allocatorFor(holds, where),
                                                                  deadline, direct);
  try {
    // The device's half, here: every node step enqueued, each fragment's spread behind a gate that the
    // network step opens (transport/hierarchy/node_steps.h, passes).
    std::shared_ptr<transport::Group> group = core_.transport();
    transport::Collective plan = transport::Collective::planning(*group, deadline);
    steps->setPass(Pass::Enqueue);
    schedule(plan, *steps);
    device.copyBack(stream);
  } catch (const transport::Error& error) {
    steps->openAll();
    work->failed(fail(call.op, operation.sequence, error, operation.timeout));
    watch(stream, work, operation.op, operation.timeout, holds);
    return work;
  } catch (const std::exception& local) {
    // Part-way through the enqueue: node peers may wait in NCCL calls this rank skipped.
    steps->openAll();
    core_.broke(operation.op, operation.sequence, local.what());
    abort(std::string(operation.op) + " failed part-way");
    work->failed(std::current_exception());
    watch(stream, work, operation.op, operation.timeout, holds);
    return work;
  }
  work->enqueued(stream);
  // The device passes its end once the gates opened: the network pass fails itself at its deadline and
  // then opens them, so the watchdog gives it a grace before it calls the device late.
  watch(stream, work, operation.op, operation.timeout + kHostStageGrace, holds);
  // The network's half, in turn with the group's other host work. It opens every gate whatever comes
  // of it, and it does run: the executor runs every task it was given, a closing group's too.
  core_.submit(
      [this, work, operation, deadline, steps, holds, schedule = std::move(schedule)] {
        const std::exception_ptr failure = runOperation(
            core_, operation, deadline, holds, nullptr,
            [&](Running& running) {
              transport::Collective c = running.next();
              steps->setPass(Pass::Network);
              schedule(c, *steps);
            },
            failureHooks());
        steps->openAll();
        if (failure) work->failed(failure);
      },
      /*mayRunHere=*/false);
  return work;
}

CudaPath::Work CudaPath::staged(const Call& call, const c10::Device& where, const std::vector<at::Tensor>& inputs,
                                const std::vector<at::Tensor>& outputs, bool inPlace, HostBody body) {
  const Issued operation = issue(core_, call.op, call.timeout);
  auto work = makeWork(call, operation.sequence, inputs, outputs, where, call.type == c10d::OpType::BARRIER);
  const transport::Deadline deadline = transport::Deadline::after(operation.timeout);
  if (call.terms) {
    // Before anything is enqueued: a refused call leaves the outputs as they were.
    if (auto refused = agreeNow(operation, *call.terms, deadline)) {
      work->failed(refused);
      return work;
    }
  }
  c10::cuda::CUDAGuard guard(where);
  auto stream = streamFor(where, call.asyncOp, inputs, outputs);
  if (capturing(stream)) {
    core_.invalid(call.op, "cannot be captured in a CUDA graph here: it runs on the host, through pinned memory");
  }
  startTimer(*work, stream);
  // All of it enqueued now, on the operation's stream: the copies to pinned host memory, a gate, and the
  // copies back behind it. The host body runs on the executor once the copies out landed, then opens
  // the gate.
  std::vector<at::Tensor> hostInputs, hostOutputs;
  auto holds = holding(inputs, outputs);
  at::Tensor counter = at::zeros({1}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  holds->tensors.push_back(counter);
  auto gate = std::make_shared<transport::nccl::StreamGate>(static_cast<uint32_t*>(counter.data_ptr()));
  auto copiedOut = std::make_shared<c10::cuda::CUDAEvent>(cudaEventDisableTiming | cudaEventBlockingSync);
  {
    c10::cuda::CUDAStreamGuard onStream(stream);
    for (const auto& t : inputs) hostInputs.push_back(t.defined() ? pinnedLike(t).copy_(t, /*non_blocking=*/true) : t);
    for (size_t i = 0; i < outputs.size(); ++i) {
      hostOutputs.push_back(inPlace ? hostInputs.at(i) : (outputs[i].defined() ? pinnedLike(outputs[i]) : outputs[i]));
    }
    copiedOut->record(stream);
    try {
      gate->wait(stream.stream(), 1);
    } catch (const transport::Error& error) {
      C10_THROW_ERROR(DistBackendError, core_.label(call.op, operation.sequence) + ": " + error.what());
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].defined()) outputs[i].copy_(hostOutputs[i], /*non_blocking=*/true);
    }
  }
  holds->tensors.append(hostInputs.begin(), hostInputs.end());
  holds->tensors.append(hostOutputs.begin(), hostOutputs.end());
  work->enqueued(stream);
  watch(stream, work, operation.op, operation.timeout + kHostStageGrace, holds);
  core_.submit(
      [this, work, operation, deadline, where, holds, gate, copiedOut, hostInputs, hostOutputs,
       body = std::move(body)]() mutable {
        std::exception_ptr failure;
        try {
          c10::cuda::CUDAGuard onDevice(where);
          {
            // Within the deadline: a stream stuck behind a hung kernel must not hold the executor.
            c10::cuda::CUDAStreamCaptureModeGuard quietly(cudaStreamCaptureModeThreadLocal);
            transport::pollUntil([&] { return copiedOut->query(); }, deadline, [this] { return givingUp(); },
                                 "the copy of its inputs to host memory");
          }
          // The host body reads the copies as it is made (premultiplied inputs, coalesced buffers): now.
          // The host's failure handling: nothing of it is on NCCL.
          failure = runOperation(core_, operation, deadline, holds, nullptr, body(hostInputs, hostOutputs));
        } catch (const transport::Error& error) {
          failure = core_.fail(operation.op, operation.sequence, error, operation.timeout);
        } catch (...) {
          failure = std::current_exception();
        }
        // The copies back carry the host's results, or, after a failure, whatever the buffers hold.
        gate->openAll();
        if (failure) work->failed(failure);
        // The caller's tensors go while `holds` has them too, so that this thread's reference to them
        // is not the last (held_tensors.hpp).
        hostInputs.clear();
        hostOutputs.clear();
        body = nullptr;
      },
      /*mayRunHere=*/false);
  return work;
}

// ---- failures -----------------------------------------------------------------------------------

bool CudaPath::ncclAborted() {
  for (auto& comm : communicators()) {
    if (comm->aborted()) return true;
  }
  return false;
}

std::exception_ptr CudaPath::fail(const char* op, uint64_t sequence, const transport::Error& error,
                                  std::chrono::milliseconds timeout) {
  std::exception_ptr failure = core_.fail(op, sequence, error, timeout);
  if (cuda_plan::failsGroup(error.kind(), ncclAborted())) {
    core_.markFailed(std::string(op) + " seq " + std::to_string(sequence) + ": " + error.what());
    watchdog_->failAll(failure);
    abortNccl();
  }
  return failure;
}

void CudaPath::deviceFailed(const Watchdog::Watched* watched, const transport::Error& error) {
  const char* op = watched != nullptr ? watched->op : "a CUDA operation";
  const uint64_t sequence = watched != nullptr ? watched->work->getSequencenumber() : core_.sequence();
  if (core_.failed()) {
    // Reported already (the ranks asked, the table written): the rest of what is late fails with it.
    watchdog_->failAll(core_.unusable(op, sequence));
    return abortNccl();
  }
  std::exception_ptr failure = core_.fail(op, sequence, error, core_.timeoutOf(c10d::kUnsetTimeout));
  core_.markFailed(std::string(op) + " seq " + std::to_string(sequence) + ": " + error.what());
  // First the error, then the abort: the operations whose kernels return early carry the error.
  watchdog_->failAll(failure);
  abortNccl();
}

std::optional<transport::Error> CudaPath::asyncError() {
  for (auto& comm : communicators()) {
    if (auto error = comm->asyncError()) return error;
  }
  return std::nullopt;
}

void CudaPath::abortNccl() {
  {
    std::lock_guard<std::mutex> lock(devicesMutex_);
    aborted_ = true;
  }
  for (auto& comm : communicators()) comm->abort();
}

bool CudaPath::givingUp() const { return stopping_.load() || core_.failed(); }

void CudaPath::abort(const std::string& why) {
  stopping_.store(true);
  core_.markFailed(why);
  watchdog_->failAll(std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, uint32_t(__LINE__)},
                            "hier: group '" + core_.name() + "': " + why + "; its CUDA operations were aborted")));
  abortNccl();
}

void CudaPath::close() {
  {
    std::lock_guard<std::mutex> lock(devicesMutex_);
    if (closed_) return;
    closed_ = true;
  }
  stopping_.store(true);  // copies still awaited give up: the threads below are joined
  sends_.drainAndStop();
  const auto grace = std::min<std::chrono::milliseconds>(core_.timeoutOf(c10d::kUnsetTimeout), kShutdownGrace);
  const transport::Deadline deadline = transport::Deadline::after(grace);
  const bool drained = watchdog_->drain(deadline);
  for (auto& comm : communicators()) {
    if (drained)
      comm->close(deadline);  // aborts instead if the peers do not finish in time
    else
      comm->abort();
  }
  // After an abort the kernels return: give the device a moment to pass the ends, then let go of what
  // it finished (the rest stays held, never freed under the device).
  if (!drained) watchdog_->drain(transport::Deadline::after(std::chrono::seconds(5)));
  watchdog_->stop();
}

}  // namespace hier
