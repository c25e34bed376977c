#include "plugin/work.hpp"

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "plugin/held_tensors.hpp"

namespace hier {

std::string errorSummary(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

c10::intrusive_ptr<c10::ivalue::Future> makeResultFuture() {
  return c10::make_intrusive<c10::ivalue::Future>(c10::AnyEnumType::get());
}

void settleResult(c10::ivalue::Future& result, const std::exception_ptr& error) {
  if (result.completed()) return;
  c10d::WorkResult outcome = c10d::WorkResult::SUCCESS;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const TimedOut&) {
      outcome = c10d::WorkResult::TIMEOUT;
    } catch (...) {
      outcome = c10d::WorkResult::COMM_ERROR;
    }
  }
  result.markCompleted(c10::IValue(static_cast<uint8_t>(outcome)));
}

const char* profilingTitle(const char* op) {
  static std::mutex mutex;
  static std::map<std::string, std::string, std::less<>> titles;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = titles.find(std::string_view(op));
  if (it == titles.end()) it = titles.emplace(op, std::string("hier:") + op).first;
  return it->second.c_str();
}

std::string OperationName::str() const {
  std::string text = std::string("hier: ") + op + " on group '" + (group ? *group : std::string()) + "' (" +
                     (pointToPoint ? "p2p seq " : "seq ") + std::to_string(sequence) + ", rank " +
                     std::to_string(rank) + "/" + std::to_string(size);
  if (pointToPoint) {
    text += ", peer ";
    text += peer < 0 ? std::string("any") : std::to_string(peer);
    text += ", tag ";
    text += std::to_string(tag);
  }
  return text + ")";
}

namespace {

// The profiler's record of an operation reads its inputs; without a profiler they are not copied.
std::optional<std::vector<at::Tensor>> profiled(const char* profilingTitle, c10::ArrayRef<at::Tensor> inputs) {
  if (profilingTitle == nullptr) return std::nullopt;
  return inputs.vec();
}

}  // namespace

WorkHier::WorkHier(int rank, c10d::OpType opType, OperationName name, const char* profilingTitle,
                   c10::ArrayRef<at::Tensor> inputs, std::vector<at::Tensor> outputs, registry::WorkTable::Row row,
                   std::shared_ptr<const void> holds, std::chrono::steady_clock::time_point started)
    : c10d::Work(rank, opType, profilingTitle, profiled(profilingTitle, inputs)),
      name_(std::move(name)),
      holds_(std::move(holds)),
      outputs_(std::move(outputs)),
      row_(std::move(row)),
      started_(started.time_since_epoch().count()) {}

WorkHier::~WorkHier() {
  // The last reference may go on one of hier's own threads (the task that ran the operation, when the
  // caller let go of the work first): there, the outputs, and the futures that hold them, go to a
  // caller's thread (held_tensors.hpp).
  deferRelease(outputs_);
  deferRelease(future_);
  deferRelease(result_);
}

void WorkHier::markStarted(std::chrono::steady_clock::time_point when) {
  std::chrono::steady_clock::rep unset = 0;
  started_.compare_exchange_strong(unset, when.time_since_epoch().count());
  row_.started(when);
}

void WorkHier::complete(std::exception_ptr error) {
  // Several threads may notice the end of a point-to-point work; the future completes once.
  if (completing_.exchange(true)) return;
  const auto now = std::chrono::steady_clock::now();
  finished_.store(now.time_since_epoch().count());
  std::chrono::steady_clock::rep unset = 0;
  started_.compare_exchange_strong(unset, now.time_since_epoch().count());  // failed before it started
  // Release the inputs now; the outputs stay, they are the result.
  holds_.reset();
  row_.finished(now, error ? errorSummary(error) : std::string());
  c10::intrusive_ptr<c10::ivalue::Future> future, result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    settled_ = true;
    error_ = error;
    future = future_;
    result = result_;
  }
  // Gloo's order: the futures complete (their callbacks run: DDP's hooks, torchft's then()), then the
  // waiters wake, so a future asked for once wait() returned is complete. Outside the lock: a callback may
  // call this work.
  if (future) settle(*future, false);
  if (result) settle(*result, true);
  finish(error);
}

void WorkHier::settle(c10::ivalue::Future& future, bool isResult) {
  if (isResult) {
    settleResult(future, error_);
  } else if (error_) {
    future.setError(error_);
  } else {
    future.markCompleted(c10::IValue(outputs_));
  }
}

c10::intrusive_ptr<c10::ivalue::Future> WorkHier::futureIn(c10::intrusive_ptr<c10::ivalue::Future>& slot) {
  const bool isResult = &slot == &result_;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot) return slot;
    slot = isResult ? makeResultFuture() : c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
    future = slot;
    if (!settled_) return future;  // complete() will settle it
  }
  settle(*future, isResult);
  return future;
}

void WorkHier::wantFuture() {
  futureWanted_.store(true);
  row_.waited();  // whoever holds a future takes care of the result (DDP's reducer does)
  // The request may have settled before anybody wanted a future: complete it now, then.
  if (driver_ && !c10d::Work::isCompleted()) driver_(false);
}

c10::intrusive_ptr<c10::ivalue::Future> WorkHier::getFuture() {
  auto future = futureIn(future_);  // before wantFuture(), which may complete the work
  wantFuture();
  return future;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkHier::getFutureResult() {
  auto result = futureIn(result_);
  wantFuture();
  return result;
}

bool WorkHier::isCompleted() {
  if (driver_ && !c10d::Work::isCompleted()) driver_(false);
  if (!c10d::Work::isCompleted()) return false;
  row_.waited();  // a caller that polls saw it done
  releaseDeferred();
  return true;
}

bool WorkHier::wait(std::chrono::milliseconds timeout) {
  row_.waited();
  if (c10d::allow_inflight_collective_as_graph_input()) {
    // Issued inside allow_inflight_collective_as_graph_input_ctx(): c10d registered this work for its
    // output tensors; waiting for it here takes it out again (torch's own backends do the same).
    c10d::unregister_work(c10::intrusive_ptr<c10d::Work>::unsafe_reclaim_from_nonowning(this));
  }
  if (driver_ && timeout == kNoTimeout) driver_(true);
  if (driver_ && timeout != kNoTimeout) {
    // A point-to-point work finishes when a thread that waits for it or polls it sees its transfer settle
    // (UCX's progress thread moves the transfer meanwhile): poll it, within the timeout.
    const auto until = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::microseconds(20);
    while (!c10d::Work::isCompleted() && std::chrono::steady_clock::now() < until) {
      driver_(false);
      if (c10d::Work::isCompleted()) break;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    // Never forever: every operation has a deadline, and the transport fails it when that passes.
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    C10_THROW_ERROR(DistBackendError, description() + ": wait() gave up after " + std::to_string(timeout.count()) +
                                          " ms; the operation is still running and keeps its own deadline");
  }
  const std::exception_ptr error = exception_;
  lock.unlock();
  // The operation let go of its tensors before it completed, some perhaps on hier's own threads, which
  // defer them to a caller's thread: this one.
  releaseDeferred();
  if (error) std::rethrow_exception(error);
  return true;
}

void WorkHier::release_resources() {
  driver_ = nullptr;
  abortHandler_ = nullptr;
}

std::vector<at::Tensor> WorkHier::result() {
  TORCH_CHECK(c10d::Work::isCompleted(), description(), ": result() needs the work to be completed; call wait() first");
  return outputs_;
}

float WorkHier::getDuration() const {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(completed_, description(), ": getDuration() needs the work to be completed first");
  const std::chrono::steady_clock::duration ran(finished_.load() - started_.load());
  return std::chrono::duration<float, std::milli>(ran).count();
}

int WorkHier::sourceRank() const {
  TORCH_CHECK(sourceRank_.load() >= 0, description(),
              ": sourceRank() is known once a receive from any source completed");
  return sourceRank_.load();
}

void WorkHier::abort() {
  if (abortHandler_) (*abortHandler_)();
}

}  // namespace hier
