#include "plugin/held_tensors.hpp"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "transport/base/helper_thread.h"

namespace hier {
namespace {

struct Deferred {
  std::mutex mutex;
  std::vector<at::Tensor> tensors;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;
  std::atomic<bool> any{false};
};

// Never destroyed: a helper thread may defer something while the process exits.
Deferred& deferred() {
  static auto* d = new Deferred;
  return *d;
}

}  // namespace

HeldTensors::~HeldTensors() { deferRelease(tensors); }

void deferRelease(c10::ArrayRef<at::Tensor> tensors) {
  if (tensors.empty() || !transport::onHelperThread()) return;
  Deferred& d = deferred();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.tensors.insert(d.tensors.end(), tensors.begin(), tensors.end());
  d.any.store(true, std::memory_order_release);
}

void deferRelease(const c10::intrusive_ptr<c10::ivalue::Future>& future) {
  if (!future || !transport::onHelperThread()) return;
  Deferred& d = deferred();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.futures.push_back(future);
  d.any.store(true, std::memory_order_release);
}

void releaseDeferred() {
  Deferred& d = deferred();
  if (!d.any.load(std::memory_order_acquire) || transport::onHelperThread()) return;
  std::vector<at::Tensor> tensors;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    tensors.swap(d.tensors);
    futures.swap(d.futures);
    d.any.store(false, std::memory_order_relaxed);
  }
  // They go here, on the caller's thread, outside the lock (freeing a Python object may run Python).
}

}  // namespace hier
