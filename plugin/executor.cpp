#include "plugin/executor.hpp"

#include <pthread.h>

#include "transport/base/helper_thread.h"

namespace hier {

Executor::~Executor() { drainAndStop(); }

Executor::Claim Executor::claim(bool mayRunHere) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopping_) {
    // The thread is gone (or going): run here, after whatever runs now.
    changed_.wait(lock, [&] { return !running_ && queue_.empty(); });
    mayRunHere = true;
  }
  if (!(mayRunHere && queue_.empty() && !running_)) return Claim();
  running_ = true;
  return Claim(this);
}

void Executor::release() {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    // Only a queued task (for the group's thread) or a stopping executor (claim and queue wait then)
    // gives anyone a reason to go on. A notify with nothing for the thread to do still wakes it, asleep
    // on changed_, to look and sleep again: a futex call and two context switches on every blocking
    // call once the thread exists (the first asynchronous call starts it), the caller's core taken
    // meanwhile.
    wake = stopping_ || !queue_.empty();
  }
  if (wake) changed_.notify_all();
}

bool Executor::runNext() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopping_ || running_ || queue_.empty()) return false;
  Task task = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  lock.unlock();
  task();
  release();
  return true;
}

void Executor::queue(Task task) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopping_) {
    // Stopped since claim() said no: run it here after all.
    changed_.wait(lock, [&] { return !running_ && queue_.empty(); });
    running_ = true;
    lock.unlock();
    task();
    release();
    return;
  }
  queue_.push_back(std::move(task));
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  changed_.notify_all();
}

void Executor::loop() {
  pthread_setname_np(pthread_self(), threadName_.substr(0, 15).c_str());
  transport::markHelperThread();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return (!queue_.empty() && !running_) || (stopping_ && queue_.empty()); });
    if (queue_.empty()) return;
    Task task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    task();
    // What the task holds goes before the next task may start: whatever waits for that one then finds
    // it let go of (held_tensors.hpp).
    task = nullptr;
    lock.lock();
    running_ = false;
    changed_.notify_all();
  }
}

void Executor::drainAndStop() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  changed_.notify_all();
  if (thread_.joinable()) {
    lock.unlock();
    thread_.join();
    lock.lock();
  }
}

}  // namespace hier
