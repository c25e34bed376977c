// The Work that every hier operation returns.
//
// CPU semantics: wait() blocks the calling thread (asleep, not spinning) until the operation finished,
// then rethrows its error. The future completes with the output tensors, which is what DDP's reducer
// and communication hooks consume. As with Gloo, the future completes first (its callbacks run), then
// the work: once wait() returns or isCompleted() is true, the future is complete; a thread woken by the
// future may find the work completing still. The work holds the tensors the operation reads and writes until it
// completes, so callers may drop theirs. Every method is thread-safe, and wait() may be called any
// number of times from any thread (functional collectives' wait_tensor does so, long after issue).
// The work keeps its row of the group's work table up to date: started, finished, waited for.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "registry/torch_version.hpp"
#include "registry/work_table.hpp"

namespace hier {

// The message of a failure, without the C++ backtrace torch's errors carry.
std::string errorSummary(const std::exception_ptr& error);

// The error of an operation whose own deadline passed on this rank (Python sees a DistBackendError).
class TimedOut : public c10::DistBackendError {
 public:
  using c10::DistBackendError::DistBackendError;
};

// Work::getFutureResult(): a future that completes, never with an error, with how the operation ended
// (c10d::WorkResult as an integer, as ProcessGroupNCCL's): SUCCESS, TIMEOUT when it failed with
// TimedOut, COMM_ERROR for any other failure.
c10::intrusive_ptr<c10::ivalue::Future> makeResultFuture();
void settleResult(c10::ivalue::Future& result, const std::exception_ptr& error);

// "hier:allreduce", the profiler's title for an operation's work (`op` is the op's name). c10d::Work keeps
// the title's pointer, not a copy: each title is made once and kept for the life of the process.
const char* profilingTitle(const char* op);

// What an operation is called in its errors: "hier: allreduce on group 'g' (seq 7, rank 0/2)", and for
// point to point "hier: send on group 'g' (p2p seq 3, rank 0/2, peer 1, tag 0)". Spelled out only when
// something reads it: spelling it for every operation cost more than moving a small tensor.
struct OperationName {
  std::shared_ptr<const std::string> group;  // the group's name when the operation was issued
  const char* op = "";                       // a string literal
  uint64_t sequence = 0;
  int rank = 0;
  int size = 0;
  bool pointToPoint = false;
  int peer = -1;  // point to point: the other rank, -1 for any source
  int tag = 0;
  std::string str() const;
};

class WorkHier : public c10d::Work {
 public:
  // `profilingTitle` (null when nobody profiles) must outlive the work: c10d keeps the pointer, and the
  // profiler reads `inputs`. `holds` keeps what the operation reads alive until it completes. `started`:
  // when it started, if it started as it was issued (else markStarted() says when).
  WorkHier(int rank, c10d::OpType opType, OperationName name, const char* profilingTitle,
           c10::ArrayRef<at::Tensor> inputs, std::vector<at::Tensor> outputs, registry::WorkTable::Row row,
           std::shared_ptr<const void> holds, std::chrono::steady_clock::time_point started = {});
  ~WorkHier() override;

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // The outputs, once the work completed (as Gloo's: before that they may still be written).
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override;
  uint64_t getSequencenumber() const override { return name_.sequence; }
#if HIER_TORCH_HAS_COMPLETION_HOOKS
  // What the group's keyed completion hooks get for this work (its work-table row's key: never reused).
  uint64_t getCompletionKey() const override { return row_.key(); }
#endif
  int sourceRank() const override;
  float getDuration() const override;
  void abort() override;
  // Called when the last strong reference goes. A point-to-point driver holds its transfer, whose settle
  // hook holds this work weakly; c10 keeps an object's memory (and so its members) while weak references
  // remain, so the two would keep each other, and the tensors, alive for ever. Dropping the hooks here
  // breaks that cycle.
  void release_resources() override;

  // Completes the futures, then marks the work done (or failed) and wakes its waiters, in Gloo's order.
  // Idempotent: the first call wins.
  void complete(std::exception_ptr error = nullptr);
  // The operation started running at `when`.
  void markStarted(std::chrono::steady_clock::time_point when);
  // How to make an unfinished operation finish early (the backend's abort); set by the backend, one
  // handler shared by all the works of a group.
  using AbortHandler = std::shared_ptr<const std::function<void()>>;
  void setAbortHandler(AbortHandler handler) { abortHandler_ = std::move(handler); }
  // What wait() and polls do first. Point-to-point work, which no executor completes: drive(block) looks
  // at (or, with block, waits for) the underlying request and completes the work when it is done. A
  // queued collective: drive(true) runs it on the waiting thread if the group's thread has not yet.
  void setDriver(std::function<void(bool block)> driver) { driver_ = std::move(driver); }
  std::string description() const { return name_.str(); }
  // Whether anybody asked for the future (point-to-point work completes it off the callback then).
  bool futureWanted() const { return futureWanted_.load(); }
  // For a receive from any source: who sent the message.
  void setSourceRank(int rank) { sourceRank_ = rank; }

 private:
  // getFuture() and getFutureResult(): someone will take the result from a future (point-to-point work
  // then completes off UCX's callbacks); one that settled already completes now.
  void wantFuture();
  // The futures are made when first asked for (most operations are only waited for): `slot` is future_
  // or result_; one made after the work settled is completed at once.
  c10::intrusive_ptr<c10::ivalue::Future> futureIn(c10::intrusive_ptr<c10::ivalue::Future>& slot);
  void settle(c10::ivalue::Future& future, bool isResult);

  const OperationName name_;
  std::shared_ptr<const void> holds_;  // until the work completes
  std::vector<at::Tensor> outputs_;
  // Under c10d::Work::mutex_: the futures handed out so far, and whether complete() settled them.
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  c10::intrusive_ptr<c10::ivalue::Future> result_;
  bool settled_ = false;
  std::exception_ptr error_;  // how it ended, set with settled_ (before finish() sets exception_)
  AbortHandler abortHandler_;
  std::function<void(bool)> driver_;
  std::atomic<bool> completing_{false};
  std::atomic<bool> futureWanted_{false};
  std::atomic<int> sourceRank_{-1};
  const registry::WorkTable::Row row_;
  // When the operation started and ended, as steady clock counts (0: not yet); set once each, read by
  // getDuration() once the work completed.
  std::atomic<std::chrono::steady_clock::rep> started_{0};
  std::atomic<std::chrono::steady_clock::rep> finished_{0};
};

}  // namespace hier
