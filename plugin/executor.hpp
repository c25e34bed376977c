// Runs a group's collectives one at a time, in the order they were issued, which is the order every
// rank agrees on. A blocking call (async_op=False) runs on the caller's thread when nothing is queued
// ahead of it: no hand-off, no context switch. Everything else runs on the group's own thread, started
// on first use.
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

  // Runs `task` after every task submitted before it. With `mayRunHere`, and nothing queued or running,
  // runs it right now on this thread: then it is called as it is, never wrapped in a Task (which would
  // take it to the heap).
  template <class F>
  void submit(F&& task, bool mayRunHere) {
    if (claim(mayRunHere)) {
      task();
      release();
      return;
    }
    queue(Task(std::forward<F>(task)));
  }
  // Waits until every submitted task ran, then stops the thread. Tasks submitted later run inline.
  void drainAndStop();

 private:
  // Whether a task may run on this thread now (then the caller runs it and calls release()): with
  // `mayRunHere` when nothing is queued or running; always once the executor stopped, after whatever
  // runs now.
  bool claim(bool mayRunHere);
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
