// The completion threads of CUDA futures (plugin/cuda/completions.hpp): a completion that waits for
// another one (a then() callback waiting for another future, as DDP's PowerSGD hook does) never keeps
// that one from running.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "plugin/cuda/completions.hpp"

namespace hier {
namespace {

TEST(Completions, ACompletionWaitingForALaterOneDoesNotHoldItUp) {
  constexpr int kChain = 8;  // completion k waits for completion k + 1, which is run after it
  std::mutex mutex;
  std::condition_variable changed;
  bool done[kChain] = {};
  for (int k = 0; k < kChain; ++k) {
    Completions::process().run([&, k] {
      std::unique_lock<std::mutex> lock(mutex);
      if (k + 1 < kChain) changed.wait(lock, [&] { return done[k + 1]; });
      done[k] = true;
      changed.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mutex);
  EXPECT_TRUE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return done[0]; }))
      << "a completion waiting for a later one held it up";
}

TEST(Completions, ManyShortCompletionsAllRun) {
  std::mutex mutex;
  std::condition_variable changed;
  int ran = 0;
  for (int k = 0; k < 1000; ++k) {
    Completions::process().run([&] {
      std::lock_guard<std::mutex> lock(mutex);
      ++ran;
      changed.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mutex);
  EXPECT_TRUE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return ran == 1000; })) << ran << " of 1000 ran";
}

}  // namespace
}  // namespace hier
