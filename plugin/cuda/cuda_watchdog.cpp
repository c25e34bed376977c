#include "plugin/cuda/cuda_watchdog.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

#include <vector>

#include "plugin/cuda/completions.hpp"
#include "plugin/logging.hpp"
#include "transport/base/helper_thread.h"

namespace hier {
namespace {

constexpr std::chrono::milliseconds kWatchdogTick{100};
constexpr std::chrono::seconds kCompleterGrace{5};

// The waits of hier's own threads must not invalidate a capture made by another thread.
void threadLocalCaptureMode() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
  cudaThreadExchangeStreamCaptureMode(&mode);
}

}  // namespace

struct Watchdog::Shared {
  std::mutex mutex;
  std::condition_variable changed;
  std::list<std::shared_ptr<Entry>> entries;  // in the order they were watched
  bool stopping = false;
  bool completerGone = false;
};

Watchdog::Watchdog(std::function<std::optional<transport::Error>()> asyncError,
                   std::function<void(const Watched*, const transport::Error&)> onFailure)
    : asyncError_(std::move(asyncError)), onFailure_(std::move(onFailure)), shared_(std::make_shared<Shared>()) {
  // The completer uses nothing of this object: stop() may leave it behind, waiting for a device.
  completer_ = std::thread([shared = shared_] {
    pthread_setname_np(pthread_self(), "hier-cuda-done");
    transport::markHelperThread();
    threadLocalCaptureMode();
    std::unique_lock<std::mutex> lock(shared->mutex);
    for (;;) {
      shared->changed.wait(lock, [&] { return !shared->entries.empty() || shared->stopping; });
      if (shared->entries.empty()) break;
      // The oldest stays listed until the device passed it: drain() waits for the list to empty.
      std::shared_ptr<Entry> entry = shared->entries.front();
      lock.unlock();
      try {
        c10::cuda::CUDAGuard onDevice(entry->watched.work->deviceIndex());
        entry->watched.end->synchronize();  // asleep: a blocking-sync event
      } catch (const std::exception& error) {
        hierLog(transport::LogLevel::Error,
                entry->watched.work->description() + ": waiting for the device: " + error.what());
      }
      c10::intrusive_ptr<CudaWork> work = entry->watched.work;
      Completions::process().run([work] { work->finished(); });
      lock.lock();
      shared->entries.pop_front();
      shared->changed.notify_all();
      lock.unlock();
      entry.reset();  // lets go of the memory the device used
      lock.lock();
    }
    shared->completerGone = true;
    shared->changed.notify_all();
  });
  watchdog_ = std::thread([this] { watchdog(); });
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::watch(Watched watched) {
  auto entry = std::make_shared<Entry>(Entry{std::move(watched)});
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->entries.push_back(std::move(entry));
  }
  shared_->changed.notify_all();
}

void Watchdog::failAll(const std::exception_ptr& error) {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    entries.assign(shared_->entries.begin(), shared_->entries.end());
  }
  for (auto& entry : entries) entry->watched.work->failed(error);
}

bool Watchdog::drain(const transport::Deadline& deadline) {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  return shared_->changed.wait_until(lock, deadline.when, [&] { return shared_->entries.empty(); });
}

void Watchdog::stop() {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  if (shared_->stopping) return;
  shared_->stopping = true;
  shared_->changed.notify_all();
  lock.unlock();
  if (watchdog_.joinable()) watchdog_.join();
  lock.lock();
  if (shared_->changed.wait_for(lock, kCompleterGrace, [&] { return shared_->completerGone; })) {
    lock.unlock();
    completer_.join();
    return;
  }
  TORCH_WARN("hier: ", shared_->entries.size(),
             " CUDA operation(s) had not finished on the device when their "
             "group shut down (the first: ",
             shared_->entries.front()->watched.work->description(),
             "); the memory they use is kept until the device passes them");
  lock.unlock();
  completer_.detach();  // it holds what it needs, and finishes when the device does
}

void Watchdog::watchdog() {
  pthread_setname_np(pthread_self(), "hier-watchdog");
  transport::markHelperThread();
  threadLocalCaptureMode();  // its queries of the ends must not invalidate another thread's capture
  std::unique_lock<std::mutex> lock(shared_->mutex);
  while (!shared_->stopping) {
    shared_->changed.wait_for(lock, kWatchdogTick, [&] { return shared_->stopping; });
    if (shared_->stopping) break;
    std::vector<std::shared_ptr<Entry>> late;
    for (auto& entry : shared_->entries) {
      if (!entry->reported && entry->watched.deadline.passed()) {
        entry->reported = true;
        late.push_back(entry);
      }
    }
    lock.unlock();
    try {
      for (auto& entry : late) {
        onFailure_(&entry->watched,
                   transport::Error(transport::ErrorKind::Timeout,
                                    "the device did not finish it within " +
                                        std::to_string(entry->watched.deadline.timeout.count()) +
                                        " ms of its enqueue (a peer is gone or stuck); NCCL is aborted"));
      }
      if (auto error = asyncError_()) onFailure_(nullptr, *error);
    } catch (const std::exception& error) {
      // The watchdog itself must go on: a throw here would terminate the process.
      hierLog(transport::LogLevel::Error, std::string("hier watchdog: ") + error.what());
    }
    lock.lock();
  }
}

}  // namespace hier
