// Follows a group's CUDA operations until the device is done with them, and says when it will not be.
//
//   completer  sleeps on the end event of the oldest operation still watched (a blocking-sync event: no
//              core spins), then hands its completion to the process's completion threads
//              (completions.hpp: futures complete there, or carry the failure found meanwhile) and lets
//              go of the memory it held; then the next, in the order they were watched.
//   watchdog   wakes every 100 ms: an operation past its deadline, or an asynchronous error of one of
//              the group's NCCL communicators (a peer failed), goes to `onFailure`, which aborts NCCL (its
//              kernels return, so the ends are reached) and fails the group.
//
// Both threads make the device of what they wait for current first, so no context appears on GPU 0, and
// run in thread-local capture mode, so that their waits never invalidate a CUDA graph another thread is
// capturing. Operations enqueued during capture are not watched: nothing runs before the graph replays.
#pragma once

#include <c10/cuda/CUDAEvent.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "plugin/cuda/cuda_work.hpp"
#include "transport/base/deadline.h"
#include "transport/base/error.h"

namespace hier {

class Watchdog {
 public:
  struct Watched {
    c10::intrusive_ptr<CudaWork> work;
    const char* op = "";
    transport::Deadline deadline;       // the device must pass the end by then
    std::shared_ptr<const void> holds;  // memory the device reads or writes until the end
    // Recorded on the operation's stream after its last step (blocking-sync): the end the completer
    // waits for.
    std::shared_ptr<c10::cuda::CUDAEvent> end;
  };
  // `asyncError`: the first asynchronous error of the group's NCCL communicators, if any.
  // `onFailure(watched, error)`: `watched` is the operation past its deadline, or null for an NCCL error.
  Watchdog(std::function<std::optional<transport::Error>()> asyncError,
           std::function<void(const Watched*, const transport::Error&)> onFailure);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void watch(Watched watched);
  // Every watched operation fails with `error` before it completes (NCCL was aborted: what they
  // computed is lost).
  void failAll(const std::exception_ptr& error);
  // Waits until the device passed the end of every watched operation; false if `deadline` came first.
  bool drain(const transport::Deadline& deadline);
  // Stops the threads. What the device has not finished is kept, never freed under it (a warning says
  // so): a completer still waiting for the device is left to finish on its own.
  void stop();

 private:
  struct Entry {
    Watched watched;
    bool reported = false;  // given to onFailure
  };
  struct Shared;  // the entries, their lock, and whether the threads are to stop
  void complete();
  void watchdog();

  std::function<std::optional<transport::Error>()> asyncError_;
  std::function<void(const Watched*, const transport::Error&)> onFailure_;
  std::shared_ptr<Shared> shared_;
  std::thread completer_;
  std::thread watchdog_;
};

}  // namespace hier
