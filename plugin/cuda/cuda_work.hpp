// The Work of an operation on CUDA tensors, with device semantics: completion is an event on the stream
// the operation ran on. wait() makes the caller's current stream wait for it (the host does not block),
// except for barrier and when a timeout is given; the future is CUDA-aware, so DDP's hooks chain on
// streams too. Operations whose stages run on the host (multi-node) record the event once their last
// GPU stage is enqueued; until then wait() waits on the host for that, within the operation's deadline.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "registry/work_table.hpp"

namespace hier {

class CudaWork : public c10d::Work {
 public:
  CudaWork(int rank, c10d::OpType opType, uint64_t sequence, std::string description, const char* profilingTitle,
           const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, c10::Device device,
           bool blocking, registry::WorkTable::Row row = {});

  // The last GPU stage is enqueued on `stream`: record the end, complete the future on that stream.
  void enqueued(const c10::cuda::CUDAStream& stream);
  void failed(std::exception_ptr error);
  // The device finished the operation (the watchdog saw its end event).
  void deviceFinished() { row_.finished(); }

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    row_.waited();
    return future_;
  }
  uint64_t getSequencenumber() const override { return sequence_; }
  void abort() override;
  void setAbortHandler(std::function<void()> handler) { abortHandler_ = std::move(handler); }
  const std::string& description() const { return description_; }

 private:
  // Marks the work waited for in the table, and takes it out of c10d's work registry if it was put there
  // (inside allow_inflight_collective_as_graph_input_ctx()).
  void forgetRegistration();
  // Host wait until enqueued() or failed(); throws the failure.
  void awaitEnqueued(std::chrono::milliseconds timeout);

  const uint64_t sequence_;
  const std::string description_;
  const bool blocking_;  // barrier: the host waits for the device
  std::vector<at::Tensor> inputs_;
  std::vector<at::Tensor> outputs_;
  c10::cuda::CUDAEvent end_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::function<void()> abortHandler_;
  const registry::WorkTable::Row row_;
  mutable std::mutex stateMutex_;
  std::condition_variable stateChanged_;
  bool enqueued_ = false;
  std::exception_ptr error_;
};

}  // namespace hier
