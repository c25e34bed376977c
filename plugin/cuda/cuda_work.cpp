#include "plugin/cuda/cuda_work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <thread>

#include "plugin/held_tensors.hpp"
#include "plugin/logging.hpp"
#include "plugin/work.hpp"  // errorSummary

namespace hier {

CudaWork::CudaWork(int rank, c10d::OpType opType, uint64_t sequence, std::string description,
                   const char* profilingTitle, const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs,
                   c10::Device device, bool blocking, registry::WorkTable::Row row)
    : c10d::Work(rank, opType, profilingTitle, inputs),
      sequence_(sequence),
      description_(std::move(description)),
      device_(device),
      blocking_(blocking),
      inputs_(inputs),
      outputs_(std::move(outputs)),
      end_(cudaEventDisableTiming | cudaEventBlockingSync),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::vector<c10::Device>{device})),
      row_(std::move(row)) {}

CudaWork::~CudaWork() {
  // As WorkHier's: the last reference may go on one of hier's own threads (held_tensors.hpp).
  deferRelease(inputs_);
  deferRelease(outputs_);
  deferRelease(future_);
  deferRelease(result_);
}

void CudaWork::startTimer(const c10::cuda::CUDAStream& stream) {
  std::lock_guard<std::mutex> lock(stateMutex_);
  if (ending_ != Ending::Pending) return;
  timedStart_.emplace(cudaEventDefault);
  timedStart_->record(stream);
}

void CudaWork::enqueued(const c10::cuda::CUDAStream& stream) {
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (ending_ != Ending::Pending) return;  // failed first
    ending_ = Ending::OnDevice;
    if (timedStart_) {
      timedEnd_.emplace(cudaEventDefault);
      timedEnd_->record(stream);
    }
  }
  row_.started(registry::Clock::now());
  end_.record(stream);
  {
    // As ProcessGroupNCCL's: the future completes now, with stream semantics. It records its own events
    // on the current streams: make that the operation's stream, where the value will be.
    c10::cuda::CUDAGuard onDevice(device_);
    c10::cuda::CUDAMultiStreamGuard onStream(stream);
    future_->markCompleted(c10::IValue(outputs_));
  }
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    stream_ = stream;
    enqueued_ = true;
  }
  // Gloo's order: the future first, then the waiters.
  stateChanged_.notify_all();
  finish();  // the profiler's end and Work's own flag: the operation is on its stream
}

void CudaWork::finished() {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (over_) return;
    over_ = true;
    error = error_;
  }
  // On a completion thread, where a throw would end the process: a callback of the result future that
  // throws, or the table out of memory, is logged instead.
  try {
    settleResult(*result_, error);
    if (!error) row_.finished(registry::Clock::now());
  } catch (const std::exception& e) {
    hierLog(transport::LogLevel::Error, description_ + ": completing its result: " + e.what());
  }
}

void CudaWork::failed(std::exception_ptr error) {
  bool early;
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (failing_) return;  // the first failure wins
    failing_ = true;
    early = ending_ == Ending::Pending;
    if (early) {
      ending_ = Ending::Failed;
    } else {
      error_ = error;  // the future has its value; wait(), exception() and the result future say it
    }
  }
  row_.finished(registry::Clock::now(), errorSummary(error));
  if (!early) return;
  // Nothing of it will ever reach the device: the future fails first, then the waiters see it.
  future_->setError(error);
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    error_ = error;
  }
  stateChanged_.notify_all();
  finish(error);
  finished();
}

void CudaWork::awaitEnqueued(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(stateMutex_);
  auto ready = [&] { return enqueued_ || error_ != nullptr; };
  if (timeout == kNoTimeout) {
    // Bounded anyway: every operation fails itself at its deadline.
    stateChanged_.wait(lock, ready);
  } else if (!stateChanged_.wait_for(lock, timeout, ready)) {
    C10_THROW_ERROR(DistBackendError, description_ + ": wait() gave up after " + std::to_string(timeout.count()) +
                                          " ms; the operation is still running and keeps its own deadline");
  }
  if (error_) std::rethrow_exception(error_);
}

void CudaWork::rethrowIfFailed() const {
  std::lock_guard<std::mutex> lock(stateMutex_);
  if (error_) std::rethrow_exception(error_);
}

bool CudaWork::isCompleted() {
  std::lock_guard<std::mutex> lock(stateMutex_);
  if (error_ != nullptr) return true;
  if (!enqueued_) return false;
  c10::cuda::CUDAGuard onDevice(device_);
  return end_.query();
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
  end_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
}

bool CudaWork::wait(std::chrono::milliseconds timeout) {
  forgetRegistration();
  const auto start = std::chrono::steady_clock::now();
  awaitEnqueued(timeout);
  c10::cuda::CUDAGuard onDevice(device_);
  if (blocking_ && timeout == kNoTimeout) {
    end_.synchronize();  // asleep: the event is a blocking-sync one
  } else if (timeout != kNoTimeout) {
    // The host waits for the device, as a caller giving a timeout asks for.
    while (!end_.query()) {
      if (std::chrono::steady_clock::now() - start > timeout) {
        C10_THROW_ERROR(DistBackendError,
                        description_ + ": the device did not finish within " + std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  } else {
    end_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
  }
  rethrowIfFailed();
  // The caller's stream is ordered after the operation: the inputs may go back to the allocator (the
  // path keeps what the device itself still reads until its end passed).
  inputs_.clear();
  return true;
}

float CudaWork::getDuration() const {
  std::lock_guard<std::mutex> lock(stateMutex_);
  TORCH_CHECK(timedStart_.has_value(), description_,
              ": getDuration() needs collective timing, on before the operation was issued "
              "(ProcessGroup._enable_collectives_timing()); CUDA graph captures are never timed");
  TORCH_CHECK(error_ == nullptr, description_, ": getDuration() of a failed operation");
  TORCH_CHECK(enqueued_ && timedEnd_.has_value(), description_, ": getDuration() needs the work to be completed first");
  c10::cuda::CUDAGuard onDevice(device_);
  TORCH_CHECK(timedEnd_->query(), description_, ": getDuration() needs the work to be completed first; wait() for it");
  return timedStart_->elapsed_time(*timedEnd_);
}

int CudaWork::sourceRank() const {
  TORCH_CHECK(sourceRank_.load() >= 0, description_,
              ": sourceRank() is known once a receive from any source completed");
  return sourceRank_.load();
}

void CudaWork::abort() {
  if (abortHandler_) abortHandler_();
}

}  // namespace hier
