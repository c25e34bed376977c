// Runs a group's collectives one at a time, in the order they were issued, which is the order every
// rank agrees on. A blocking call (async_op=False) runs on the caller's thread when nothing is queued
// ahead of it: no hand-off, no context switch. Everything else runs on the group's own thread, started
// on first use, or on a thread that waits for it before that thread got to it (runNext).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace hier {

class Executor {
 public:
  using Task = std::function<void()>;  // must not throw

  explicit Executor(std::string threadName) : threadName_(std::move(threadName)) {}
  ~Executor();

  // The right to run a task on this thread now, in order (it holds the executor until it goes): given
  // with `mayRunHere` when nothing is queued or running, and always once the executor stopped, after
  // whatever runs now. Empty otherwise.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& other) noexcept : executor_(std::exchange(other.executor_, nullptr)) {}
    Claim& operator=(Claim&&) = delete;
    ~Claim() {
      if (executor_ != nullptr) executor_->release();
    }
    explicit operator bool() const { return executor_ != nullptr; }

   private:
    friend class Executor;
    explicit Claim(Executor* executor) : executor_(executor) {}
    Executor* executor_ = nullptr;
  };
  Claim claim(bool mayRunHere);

  // Runs `task` after every task submitted before it: right now on this thread when claim(mayRunHere)
  // gives the right to, and then as it is, never wrapped in a Task (which would take it to the heap).
  template <class F>
  void submit(F&& task, bool mayRunHere) {
    if (Claim here = claim(mayRunHere)) {
      task();
      return;
    }
    queue(Task(std::forward<F>(task)));
  }
  // Runs the task at the head of the queue on this thread when none is running and the executor is not
  // stopping; returns whether it ran one. For a thread about to sleep until a queued task ran: running
  // it (and those ahead of it) spares two context switches, the group's thread waking for the task and
  // the waiter waking after it, which is most of what a small asynchronous operation costs.
  bool runNext();
  // Waits until every submitted task ran, then stops the thread. Tasks submitted later run inline.
  void drainAndStop();

 private:
  void release();
  void queue(Task task);
  void loop();

  const std::string threadName_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Task> queue_;
  bool running_ = false;  // a task is running, here or on the thread
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hier
