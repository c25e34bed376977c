#include "plugin/cuda/cuda_path.hpp"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include "plugin/process_group_hier.hpp"
#include "plugin/store_bootstrap.hpp"
#include "transport/error.h"
#include "transport/prefix_bootstrap.h"

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

}  // namespace

CudaPath::CudaPath(ProcessGroupHier& group) : group_(group) {}

CudaPath::~CudaPath() {
  {
    std::lock_guard<std::mutex> lock(watchMutex_);
    stopping_ = true;
  }
  watchChanged_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

bool CudaPath::oneNode() { return topology().nodeCount() == 1; }

CudaPath::Device& CudaPath::device(const c10::Device& device) {
  std::lock_guard<std::mutex> lock(devicesMutex_);
  auto it = devices_.find(device.index());
  if (it != devices_.end()) return it->second;
  auto stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  return devices_.emplace(device.index(), Device{nullptr, stream, nullptr}).first->second;
}

std::unique_ptr<transport::nccl::Communicator> CudaPath::makeNccl(const std::string& keys, int rank, int size,
                                                                   const c10::Device& where,
                                                                   std::chrono::milliseconds timeout) {
  // The communicator's unique id lives under `keys`, inside the group's store prefix.
  auto bootstrap =
      std::make_shared<transport::PrefixBootstrap>(group_.bootstrap_, "cuda/" + std::to_string(where.index()) + keys);
  return std::make_unique<transport::nccl::Communicator>(
      *bootstrap, rank, size, where.index(),
      transport::nccl::Deadline{std::chrono::steady_clock::now() + timeout, timeout});
}

transport::nccl::Communicator& CudaPath::groupNccl(const c10::Device& where, std::chrono::milliseconds timeout) {
  Device& d = device(where);
  std::lock_guard<std::mutex> lock(devicesMutex_);
  if (!d.nccl) d.nccl = makeNccl("/", group_.getRank(), group_.getSize(), where, timeout);
  return *d.nccl;
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

c10::intrusive_ptr<c10d::Work> CudaPath::onNccl(c10d::OpType type, const char* op, std::vector<at::Tensor> inputs,
                                                std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
                                                bool asyncOp, const Enqueue& enqueue) {
  group_.checkUsable(op);
  timeout = group_.timeoutOf(timeout);
  const uint64_t sequence = group_.sequence_++;
  const c10::Device where = inputs.empty() ? outputs.at(0).device() : inputs.at(0).device();
  auto work = c10::make_intrusive<CudaWork>(group_.getRank(), type, sequence, group_.label(op, sequence),
                                            (std::string("hier:") + op).c_str(), inputs, outputs, where,
                                            type == c10d::OpType::BARRIER,
                                            group_.addRow(sequence, false, op, inputs, outputs, ""));
  work->setAbortHandler([this] { group_.abort(); });
  try {
    transport::nccl::Communicator& nccl = groupNccl(where, timeout);
    c10::cuda::CUDAGuard guard(where);
    auto stream = streamFor(where, asyncOp, inputs, outputs);
    enqueue(stream.stream(), nccl);
    work->enqueued(stream);
    watch(work, stream, timeout, group_.label(op, sequence));
  } catch (const transport::Error& error) {
    auto failure = group_.explainFailure(op, sequence, error, timeout);
    work->failed(failure);
  }
  return work;
}

void CudaPath::watch(const c10::intrusive_ptr<CudaWork>& work, const c10::cuda::CUDAStream& stream,
                     std::chrono::milliseconds timeout, std::string what, std::shared_ptr<const void> holds) {
  auto done = std::make_shared<c10::cuda::CUDAEvent>();
  done->record(stream);
  std::lock_guard<std::mutex> lock(watchMutex_);
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watchdogLoop(); });
  watched_.push_back({done, std::chrono::steady_clock::now() + timeout, work, std::move(what), std::move(holds)});
}

const transport::hierarchy::Topology& CudaPath::topology() {
  auto timeout = group_.timeoutOf(c10d::kUnsetTimeout);
  return group_.communicator_->topology({std::chrono::steady_clock::now() + timeout, timeout});
}

transport::nccl::Communicator& CudaPath::nodeNccl(const c10::Device& where, std::chrono::milliseconds timeout) {
  Device& d = device(where);
  std::lock_guard<std::mutex> lock(devicesMutex_);
  if (!d.node) {
    // Each node's ranks make their own communicator, under the node's own keys.
    const auto& t = topology();
    d.node = makeNccl("/node/" + std::to_string(t.node()) + "/", t.localRank(), t.localSize(), where, timeout);
  }
  return *d.node;
}

c10::intrusive_ptr<c10d::Work> CudaPath::acrossNodes(c10d::OpType type, const char* op, const at::Tensor& input,
                                                     const at::Tensor& output, std::chrono::milliseconds timeout,
                                                     bool asyncOp, size_t pinnedBytes, size_t scratchBytes,
                                                     NodeSchedule schedule) {
  group_.checkUsable(op);
  timeout = group_.timeoutOf(timeout);
  const uint64_t sequence = group_.sequence_++;
  const c10::Device where = input.device();
  auto work = c10::make_intrusive<CudaWork>(group_.getRank(), type, sequence, group_.label(op, sequence),
                                            (std::string("hier:") + op).c_str(), std::vector<at::Tensor>{input},
                                            std::vector<at::Tensor>{output}, where, /*blocking=*/false,
                                            group_.addRow(sequence, false, op, {input}, {output}, ""));
  work->setAbortHandler([this] { group_.abort(); });
  try {
    transport::nccl::Communicator& node = nodeNccl(where, timeout);
    c10::cuda::CUDAGuard guard(where);
    auto stream = streamFor(where, asyncOp, {input}, {output});
    auto pinned = at::empty({int64_t(pinnedBytes)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    auto scratch = at::empty({int64_t(std::max<size_t>(scratchBytes, 1))}, at::TensorOptions().dtype(at::kByte).device(where));
    recordOn({scratch}, stream);
    // UCX and the device use these until the watchdog sees the stream pass the operation's end.
    auto holds = std::make_shared<const std::vector<at::Tensor>>(std::vector<at::Tensor>{input, output, pinned, scratch});
    group_.executor_.submit(
        [this, work, op, stream, where, timeout, sequence, holds, &node, schedule = std::move(schedule)] {
          std::exception_ptr failure;
          try {
            c10::cuda::CUDAGuard onDevice(where);
            transport::Collective c(*group_.communicator_, group_.transportSequence_++, timeout, holds);
            schedule(c, node, stream.stream(), (*holds)[2].data_ptr(), (*holds)[3].data_ptr());
            work->enqueued(stream);
            watch(work, stream, timeout, group_.label(op, sequence), holds);
            return;
          } catch (const transport::Error& error) {
            failure = group_.explainFailure(op, sequence, error, timeout);
          } catch (...) {
            failure = std::current_exception();
          }
          work->failed(failure);
          abortAfterFailure(work, stream, timeout, group_.label(op, sequence), holds);
        },
        /*mayRunHere=*/!asyncOp);
  } catch (const transport::Error& error) {
    work->failed(group_.explainFailure(op, sequence, error, timeout));
  }
  return work;
}

void CudaPath::abortAfterFailure(const c10::intrusive_ptr<CudaWork>& work, const c10::cuda::CUDAStream& stream,
                                 std::chrono::milliseconds timeout, std::string what,
                                 std::shared_ptr<const void> holds) {
  // Node peers may have enqueued device steps this rank never will: abort NCCL so they return.
  abort();
  // Copies this rank already enqueued may still touch the buffers: keep them until the stream drains.
  try {
    watch(work, stream, timeout, std::move(what), std::move(holds));
  } catch (const std::exception& error) {
    TORCH_WARN("hier: could not watch the stream of a failed operation: ", error.what());
  }
}

void CudaPath::watchdogLoop() {
  std::unique_lock<std::mutex> lock(watchMutex_);
  while (!stopping_) {
    watchChanged_.wait_for(lock, std::chrono::milliseconds(100));
    auto now = std::chrono::steady_clock::now();
    for (auto it = watched_.begin(); it != watched_.end();) {
      if (it->event->query()) {
        it->work->deviceFinished();
        it = watched_.erase(it);
      } else if (now >= it->deadline) {
        // The device has not finished within the deadline: a peer is gone or stuck. Abort NCCL, so the
        // kernels return, and fail the group.
        auto work = it->work;
        std::string what = it->what;
        watched_.erase(it);
        lock.unlock();
        auto error = group_.explainFailure(
            "cuda operation", work->getSequencenumber(),
            transport::Error(transport::ErrorKind::Timeout, "the device did not finish within the deadline"),
            group_.timeoutOf(c10d::kUnsetTimeout));
        work->failed(error);
        abort();
        lock.lock();
        it = watched_.begin();
      } else {
        ++it;
      }
    }
  }
}

void CudaPath::abort() {
  std::lock_guard<std::mutex> lock(devicesMutex_);
  for (auto& [index, d] : devices_) {
    if (d.nccl) d.nccl->abort();
    if (d.node) d.node->abort();
  }
}

c10::intrusive_ptr<c10d::Work> CudaPath::staged(c10d::OpType type, const char* op, std::vector<at::Tensor> inputs,
                                                std::vector<at::Tensor> outputs, bool inPlace, const HostOp& hostOp) {
  group_.checkUsable(op);
  const uint64_t sequence = group_.sequence_;
  const c10::Device where = !inputs.empty() ? inputs[0].device() : outputs.at(0).device();
  auto work = c10::make_intrusive<CudaWork>(group_.getRank(), type, sequence, group_.label(op, sequence),
                                            (std::string("hier:") + op).c_str(), inputs, outputs, where,
                                            type == c10d::OpType::BARRIER);
  work->setAbortHandler([this] { group_.abort(); });
  c10::cuda::CUDAGuard guard(where);
  auto current = c10::cuda::getCurrentCUDAStream(where.index());
  auto stream = c10::cuda::getStreamFromPool(false, where.index());
  c10::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(stream);

  // Device to pinned host memory, on the staging stream.
  std::vector<at::Tensor> hostInputs, hostOutputs;
  {
    c10::cuda::CUDAStreamGuard onStream(stream);
    for (auto& t : inputs) hostInputs.push_back(pinnedLike(t).copy_(t, /*non_blocking=*/true));
    for (auto& t : outputs) hostOutputs.push_back(inPlace ? hostInputs.at(hostOutputs.size()) : pinnedLike(t));
  }
  recordOn(inputs, stream);
  recordOn(outputs, stream);
  auto copiedOut = std::make_shared<c10::cuda::CUDAEvent>();
  copiedOut->record(stream);

  // The group's executor runs the steps in order: wait for the copies, the CPU operation (queued by
  // hostOp behind this gate), then the copies back.
  group_.executor_.submit([copiedOut] { copiedOut->synchronize(); }, /*mayRunHere=*/false);
  c10::intrusive_ptr<c10d::Work> hostWork;
  try {
    hostWork = hostOp(hostInputs, hostOutputs);
  } catch (...) {
    work->failed(std::current_exception());
    return work;
  }
  group_.executor_.submit(
      [work, hostWork, hostOutputs, outputs, stream] {
        try {
          hostWork->wait();
          c10::cuda::CUDAStreamGuard onStream(stream);
          for (size_t i = 0; i < outputs.size(); ++i) outputs[i].copy_(hostOutputs[i], /*non_blocking=*/true);
          work->enqueued(stream);
        } catch (...) {
          work->failed(std::current_exception());
        }
      },
      /*mayRunHere=*/false);
  return work;
}

}  // namespace hier
