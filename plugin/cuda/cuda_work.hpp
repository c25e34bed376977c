// The Work of an operation on CUDA tensors, with device semantics, as ProcessGroupNCCL's.
//
//   wait()       makes the caller's current stream wait for the operation's end (the host does not block),
//                except for barrier and when a timeout is given; it rethrows a failure known by then.
//   the future   completes when the last device step is enqueued, with stream semantics (its value is
//                ready on the operation's stream), before wait() returns: a then() attached after wait()
//                runs at once. A failure found before that reaches the future; one found after it (the
//                watchdog aborted NCCL, a peer was lost) reaches wait(), exception() and the result
//                future, as with ProcessGroupNCCL.
//   the result   (getFutureResult) completes once the operation is over: the device passed its end.
//
// Operations whose stages run on the host (across hosts, staged) enqueue their last device step later
// than the call returns: until then wait() waits on the host for that, within the operation's deadline.
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
#include <optional>
#include <string>
#include <vector>

#include "plugin/work.hpp"
#include "registry/torch_version.hpp"
#include "registry/work_table.hpp"

namespace hier {

class CudaWork : public c10d::Work {
 public:
  CudaWork(int rank, c10d::OpType opType, uint64_t sequence, std::string description, const char* profilingTitle,
           const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, c10::Device device, bool blocking,
           registry::WorkTable::Row row = {});
  ~CudaWork() override;

  // Collective timing is on (enableCollectivesTiming): the operation's first device step comes next on
  // `stream`. getDuration() is then the device's time from here to the operation's end.
  void startTimer(const c10::cuda::CUDAStream& stream);
  // The last device step is enqueued on `stream`: records the end there and completes the future.
  void enqueued(const c10::cuda::CUDAStream& stream);
  // The operation is over (the device passed its end): completes the result future.
  void finished();
  // The operation failed (the first failure wins). Before enqueued(), the future carries it.
  void failed(std::exception_ptr error);

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
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override {
    row_.waited();
    return result_;
  }
  uint64_t getSequencenumber() const override { return sequence_; }
#if HIER_TORCH_HAS_COMPLETION_HOOKS
  uint64_t getCompletionKey() const override { return row_.key(); }  // as WorkHier's
#endif
  float getDuration() const override;
  // For a receive from any rank: who sent the message.
  int sourceRank() const override;
  void setSourceRank(int rank) { sourceRank_.store(rank); }
  void abort() override;
  void setAbortHandler(std::function<void()> handler) { abortHandler_ = std::move(handler); }
  const std::string& description() const { return description_; }
  c10::DeviceIndex deviceIndex() const { return device_.index(); }

 private:
  // Marks the work waited for in the table, and takes it out of c10d's work registry if it was put there
  // (inside allow_inflight_collective_as_graph_input_ctx()).
  void forgetRegistration();
  // Host wait until enqueued() or failed(), within `timeout`; throws the failure.
  void awaitEnqueued(std::chrono::milliseconds timeout);
  void rethrowIfFailed() const;

  const uint64_t sequence_;
  const std::string description_;
  const c10::Device device_;
  const bool blocking_;  // barrier: the host waits for the device
  std::vector<at::Tensor> inputs_;
  std::vector<at::Tensor> outputs_;
  // Made with cudaEventBlockingSync: a host that waits for it sleeps.
  c10::cuda::CUDAEvent end_;
  // Timed events (startTimer()): the end is recorded beside end_, which cannot time.
  std::optional<c10::cuda::CUDAEvent> timedStart_;
  std::optional<c10::cuda::CUDAEvent> timedEnd_;
  std::optional<c10::cuda::CUDAStream> stream_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  const c10::intrusive_ptr<c10::ivalue::Future> result_ = makeResultFuture();
  std::function<void()> abortHandler_;
  const registry::WorkTable::Row row_;
  mutable std::mutex stateMutex_;
  std::condition_variable stateChanged_;
  // Which of enqueued() and an early failed() came first: that one completes the future.
  enum class Ending { Pending, OnDevice, Failed };
  Ending ending_ = Ending::Pending;
  bool failing_ = false;
  // What waiters see, set once the future has it.
  bool enqueued_ = false;
  std::exception_ptr error_;
  bool over_ = false;  // the result future is completed
  std::atomic<int> sourceRank_{-1};
};

}  // namespace hier
