#include "plugin/cuda/cuda_work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "plugin/work.hpp"  // errorSummary

#include <thread>

namespace hier {

CudaWork::CudaWork(int rank, c10d::OpType opType, uint64_t sequence, std::string description,
                   const char* profilingTitle, const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                   c10::Device device, bool blocking, registry::WorkTable::Row row)
    : c10d::Work(rank, opType, profilingTitle, inputs),
      sequence_(sequence),
      description_(std::move(description)),
      blocking_(blocking),
      inputs_(inputs),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::vector<c10::Device>{device})),
      row_(std::move(row)) {}

void CudaWork::enqueued(const c10::cuda::CUDAStream& stream) {
  row_.started();
  end_.record(stream);
  {
    // The future records its own events on the current streams: make that the operation's stream.
    c10::cuda::CUDAMultiStreamGuard guard(stream);
    future_->markCompleted(c10::IValue(outputs_));
  }
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    enqueued_ = true;
  }
  stateChanged_.notify_all();
  finish();  // the profiler's end and Work's own completion flag: the operation is on its stream
}

void CudaWork::failed(std::exception_ptr error) {
  bool wasEnqueued;
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (error_) return;
    error_ = error;
    wasEnqueued = enqueued_;
  }
  row_.finished(errorSummary(error));
  stateChanged_.notify_all();
  // Once enqueued, the future has its value; a later failure (the watchdog aborted NCCL) shows in
  // exception(), isSuccess() and the next wait().
  if (!wasEnqueued) {
    future_->setError(error);
    finish(error);
  }
}

void CudaWork::awaitEnqueued(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(stateMutex_);
  auto ready = [&] { return enqueued_ || error_ != nullptr; };
  // (A failure after the enqueue is reported too: the watchdog aborted the operation on the device.)
  if (timeout == kNoTimeout) {
    // Bounded anyway: every operation fails itself at its deadline.
    stateChanged_.wait(lock, ready);
  } else if (!stateChanged_.wait_for(lock, timeout, ready)) {
    C10_THROW_ERROR(DistBackendError, description_ + ": wait() gave up after " + std::to_string(timeout.count()) +
                                          " ms; the operation is still running and keeps its own deadline");
  }
  if (error_) std::rethrow_exception(error_);
}

bool CudaWork::isCompleted() {
  std::lock_guard<std::mutex> lock(stateMutex_);
  return error_ != nullptr || (enqueued_ && end_.query());
}

bool CudaWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(stateMutex_);
  return error_ == nullptr;
}

std::exception_ptr CudaWork::exception() const {
  std::lock_guard<std::mutex> lock(stateMutex_);
  return error_;
}

void CudaWork::forgetRegistration() {
  row_.waited();
  if (c10d::allow_inflight_collective_as_graph_input()) {
    c10d::unregister_work(c10::intrusive_ptr<c10d::Work>::unsafe_reclaim_from_nonowning(this));
  }
}

void CudaWork::synchronize() {
  forgetRegistration();
  awaitEnqueued(kNoTimeout);
  end_.block(c10::cuda::getCurrentCUDAStream(end_.device_index()));
}

bool CudaWork::wait(std::chrono::milliseconds timeout) {
  forgetRegistration();
  awaitEnqueued(timeout);
  if (blocking_ || timeout != kNoTimeout) {
    // The host waits for the device: barrier's meaning, and what a caller giving a timeout asks for.
    auto until = std::chrono::steady_clock::now() + (timeout == kNoTimeout ? std::chrono::hours(24 * 365) : timeout);
    while (!end_.query()) {
      if (std::chrono::steady_clock::now() > until) {
        C10_THROW_ERROR(DistBackendError, description_ + ": the device did not finish within " +
                                              std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  } else {
    end_.block(c10::cuda::getCurrentCUDAStream(end_.device_index()));
  }
  // The caller's stream is ordered after the operation: the tensors may go back to the allocator.
  inputs_.clear();
  return true;
}

void CudaWork::abort() {
  if (abortHandler_) abortHandler_();
}

}  // namespace hier
