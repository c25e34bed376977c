#include "plugin/cuda/completions.hpp"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "transport/base/helper_thread.h"

namespace hier {
namespace {
constexpr std::chrono::seconds kIdleEnd{10};
}

struct Completions::State {
  std::mutex mutex;
  std::condition_variable work;
  std::deque<std::function<void()>> tasks;
  size_t idle = 0;  // threads waiting for a task
};

Completions& Completions::process() {
  static Completions* const completions = new Completions();  // never destroyed: its threads may run at exit
  return *completions;
}

Completions::Completions() : state_(std::make_shared<State>()) {}

void Completions::run(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->tasks.push_back(std::move(task));
  // Every task waiting has an idle thread of its own, or a new one.
  if (state_->tasks.size() > state_->idle) {
    std::thread([state = state_] {
      pthread_setname_np(pthread_self(), "hier-complete");
      transport::markHelperThread();
      std::unique_lock<std::mutex> lock(state->mutex);
      for (;;) {
        ++state->idle;
        const bool got = state->work.wait_for(lock, kIdleEnd, [&] { return !state->tasks.empty(); });
        --state->idle;
        if (!got) return;
        auto next = std::move(state->tasks.front());
        state->tasks.pop_front();
        lock.unlock();
        next();
        lock.lock();
      }
    }).detach();
  }
  state_->work.notify_one();
}

}  // namespace hier
