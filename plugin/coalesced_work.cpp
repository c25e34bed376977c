#include "plugin/coalesced_work.hpp"

#include <ATen/core/jit_type.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "plugin/work.hpp"  // makeResultFuture, settleResult

namespace hier {

CoalescedWork::CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
    : c10d::Work(rank, c10d::OpType::COALESCED), works_(std::move(works)) {}

bool CoalescedWork::isCompleted() {
  return std::all_of(works_.begin(), works_.end(), [](const auto& work) { return work->isCompleted(); });
}

bool CoalescedWork::isSuccess() const {
  return std::all_of(works_.begin(), works_.end(), [](const auto& work) { return work->isSuccess(); });
}

std::exception_ptr CoalescedWork::exception() const {
  for (const auto& work : works_) {
    if (auto error = work->exception()) return error;
  }
  return nullptr;
}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  // One deadline for the whole batch, as for one operation.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::exception_ptr first;
  for (const auto& work : works_) {
    // Every operation is waited for, even after one failed: none is left unwaited in the work table.
    try {
      if (timeout == kNoTimeout) {
        work->wait();
      } else {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        work->wait(std::max(left, std::chrono::milliseconds(1)));
      }
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  return true;
}

void CoalescedWork::synchronize() {
  for (const auto& work : works_) work->synchronize();
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> outputs;
  for (const auto& work : works_) {
    for (auto& tensor : work->result()) outputs.push_back(std::move(tensor));
  }
  return outputs;
}

c10::intrusive_ptr<c10::ivalue::Future> CoalescedWork::getFuture() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (future_) return future_;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;
  std::vector<c10::Device> devices;
  for (const auto& work : works_) {
    futures.push_back(work->getFuture());
    for (const auto& device : futures.back()->devices()) {
      if (std::find(devices.begin(), devices.end(), device) == devices.end()) devices.push_back(device);
    }
  }
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors(), devices);
  if (futures.empty()) {
    future_->markCompleted(c10::IValue(std::vector<at::Tensor>()));
    return future_;
  }
  // The last future to complete completes this one, in its callback: there the current streams wait for
  // every operation's value (Future::wait() on a completed CUDA future blocks streams, not the host).
  auto left = std::make_shared<std::atomic<size_t>>(futures.size());
  c10::weak_intrusive_ptr<c10::ivalue::Future> weakAll(future_);
  for (const auto& future : futures) {
    future->addCallback([left, futures, weakAll](c10::ivalue::Future&) {
      if (left->fetch_sub(1) != 1) return;
      auto all = weakAll.lock();
      if (!all) return;
      std::vector<at::Tensor> values;
      for (const auto& each : futures) {
        if (each->hasError()) {
          all->setError(each->exception_ptr());
          return;
        }
        each->wait();
        if (each->value().isTensorList()) {
          for (const auto& tensor : each->value().toTensorVector()) values.push_back(tensor);
        }
      }
      all->markCompleted(c10::IValue(values));
    });
  }
  return future_;
}

c10::intrusive_ptr<c10::ivalue::Future> CoalescedWork::getFutureResult() {
  auto future = getFuture();
  std::lock_guard<std::mutex> lock(mutex_);
  if (result_) return result_;
  result_ = makeResultFuture();
  future->addCallback([result = result_](c10::ivalue::Future& done) {
    settleResult(*result, done.hasError() ? done.exception_ptr() : nullptr);
  });
  return result_;
}

void CoalescedWork::abort() {
  for (const auto& work : works_) work->abort();
}

}  // namespace hier
