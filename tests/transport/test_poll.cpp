// pollUntil: the bounded wait for what only polling sees (a CUDA event's end, on the CUDA path).
#include <gtest/gtest.h>

#include <chrono>

#include "transport/base/error.h"
#include "transport/base/poll.h"

namespace hier::transport {
namespace {

using namespace std::chrono_literals;

TEST(Poll, ReturnsOnceReady) {
  int looks = 0;
  pollUntil([&] { return ++looks == 5; }, Deadline::after(10s), [] { return false; }, "the copy");
  EXPECT_EQ(looks, 5);
}

TEST(Poll, GivesUpAtTheDeadlineNamingWhatItWaitedFor) {
  const auto start = Clock::now();
  try {
    pollUntil([] { return false; }, Deadline::after(30ms), [] { return false; }, "the copy to host memory");
    ADD_FAILURE() << "returned although nothing was ever ready";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Timeout);
    EXPECT_STREQ(error.what(), "the copy to host memory timed out after 30 ms");
  }
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 30ms);
  EXPECT_LT(took, 500ms);  // sleeps of at most 1 ms, never past the deadline
}

TEST(Poll, StopsWhenTold) {
  int looks = 0;
  try {
    pollUntil([] { return false; }, Deadline::never(), [&] { return ++looks == 3; }, "the copy");
    ADD_FAILURE() << "returned although nothing was ever ready";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Aborted);
  }
  EXPECT_EQ(looks, 3);
}

}  // namespace
}  // namespace hier::transport
