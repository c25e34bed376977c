// The one Work that endCoalescing() returns for the operations issued since startCoalescing()
// (batch_isend_irecv, _coalescing_manager(device=...)), as ProcessGroupNCCL's coalesced work.
//
// Each operation was issued as it was called and runs as it would alone; this work stands for all of
// them. wait() waits for each in issue order and rethrows the first failure (CUDA ones keep their device
// semantics: the caller's stream waits, the host does not). The future completes once every operation's
// future has, with their values in issue order, or with the first error; on CUDA, with each operation's
// value ready on the stream where the future's callbacks run.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <mutex>
#include <vector>

namespace hier {

class CoalescedWork : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override;
  void abort() override;

  size_t size() const { return works_.size(); }

 private:
  const std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::mutex mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made on the first getFuture()
  c10::intrusive_ptr<c10::ivalue::Future> result_;
};

}  // namespace hier
