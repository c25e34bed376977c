// What the transport does when things go wrong: absent ranks, dead ranks, size mismatches, aborts. Every
// case must end in an Error within the deadline, never in a hang. Also: waiting does not burn a core.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "tests/transport/multiprocess.h"
#include "tests/transport/values.h"
#include "transport/agreement/agreement.h"
#include "transport/base/error.h"
#include "transport/base/process_watch.h"
#include "transport/group/collective.h"
#include "transport/group/group.h"
#include "transport/group/point_to_point.h"
#include "transport/select/dispatch.h"
#include "transport/ucx/engine.h"

namespace hier::transport {
namespace {

using std::chrono::milliseconds;
using testing::RankContext;
using testing::runRanks;
using testing::view;

double seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

double cpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// Runs `call` and returns the Error it throws; fails the check if it returns normally.
template <typename Call>
Error expectError(Call call) {
  try {
    call();
  } catch (const Error& error) {
    return error;
  }
  throw std::runtime_error("expected a transport Error, the call succeeded");
}

TEST(Failures, RankThatNeverArrivesTimesOutWithinTheDeadline) {
  auto failures = runRanks(3, [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    if (ctx.rank == 2) {
      std::this_thread::sleep_for(milliseconds(3000));  // joined the group, never enters the collective
      return;
    }
    std::vector<float> data(1000, 1.0f);
    auto start = Clock::now();
    Collective c(comm, 0, milliseconds(1000));
    Error error = expectError([&] { allreduce(c, view(data), ReduceOp::Sum); });
    HIER_CHECK(error.kind() == ErrorKind::Timeout, "kind " << toString(error.kind()) << ": " << error.what());
    HIER_CHECK(!error.peers().empty(), "the error names no rank: " << error.what());
    HIER_CHECK(seconds(start) < 2.5, "took " << seconds(start) << " s for a 1 s deadline");
    HIER_CHECK(std::string(error.what()).find("timed out after 1000 ms") != std::string::npos, error.what());
    // Stay alive until rank 2 is done, so that no rank sees another one exit instead of timing out.
    std::this_thread::sleep_until(start + milliseconds(3000));
  });
  EXPECT_EQ(failures, "");
}

// A pipelined hierarchical schedule (2 simulated hosts x 2 ranks, many fragments, the rail steps on a
// second thread) whose last rank skips the second collective: every other rank fails in time, whether
// its node step or its rail step is the one left waiting, and its pipeline thread does not hold it up.
TEST(Failures, HierarchicalScheduleWithAMissingRankFailsWithinTheDeadline) {
  auto failures = runRanks(4, [](const RankContext& ctx) {
    setenv("HIER_HOST_ID", ctx.rank < 2 ? "host-A" : "host-B", 1);
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    std::vector<float> data(4 << 20, 1.0f);  // 16 MiB: several fragments of HIER_HIERARCHY_FRAGMENT_BYTES
    {
      Collective c(comm, 0, milliseconds(30000));
      allreduce(c, view(data), ReduceOp::Sum);
      HIER_CHECK(data.front() == 4.0f && data.back() == 4.0f, "first allreduce gave " << data.front());
    }
    if (ctx.rank == 3) {
      std::this_thread::sleep_for(milliseconds(4000));
      return;
    }
    auto start = Clock::now();
    Collective c(comm, 1, milliseconds(1000));
    Error error = expectError([&] { allreduce(c, view(data), ReduceOp::Sum); });
    HIER_CHECK(error.kind() == ErrorKind::Timeout || error.kind() == ErrorKind::Aborted,
               "kind " << toString(error.kind()) << ": " << error.what());
    HIER_CHECK(seconds(start) < 2.5, "took " << seconds(start) << " s for a 1 s deadline");
    std::this_thread::sleep_until(start + milliseconds(4000));
  });
  EXPECT_EQ(failures, "");
}

TEST(Failures, RankThatNeverJoinsIsNamed) {
  auto failures = runRanks(2, [](const RankContext& ctx) {
    if (ctx.rank == 1) return;  // never creates its communicator, never publishes its address
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    std::vector<float> data(10, 1.0f);
    Collective c(comm, 0, milliseconds(500));
    Error error = expectError([&] { allreduce(c, view(data), ReduceOp::Sum); });
    HIER_CHECK(error.kind() == ErrorKind::Timeout, error.what());
    HIER_CHECK(error.peers() == std::vector<int>{1}, error.what());
    HIER_CHECK(std::string(error.what()).find("has not joined") != std::string::npos, error.what());
  });
  EXPECT_EQ(failures, "");
}

TEST(Failures, RankKilledMidCollectiveFailsThePeerInTime) {
  auto failures =
      runRanks(2,
               [](const RankContext& ctx) {
                 Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
                 std::vector<float> data(1 << 20, 1.0f);
                 {
                   Collective c(comm, 0, milliseconds(10000));
                   allreduce(c, view(data), ReduceOp::Sum);
                 }
                 if (ctx.rank == 1) _exit(0);  // dies without a word, between collectives
                 auto start = Clock::now();
                 Collective c(comm, 1, milliseconds(3000));
                 Error error = expectError([&] { allreduce(c, view(data), ReduceOp::Sum); });
                 HIER_CHECK(error.kind() == ErrorKind::PeerFailure || error.kind() == ErrorKind::Timeout, error.what());
                 HIER_CHECK(error.peers() == std::vector<int>{1}, error.what());
                 HIER_CHECK(seconds(start) < 4.5, "took " << seconds(start) << " s for a 3 s deadline");
               },
               std::chrono::seconds(60), {1});
  EXPECT_EQ(failures, "");
}

// Ranks of one host wait for each other in their shared-memory arena, where nothing tells them that a
// peer's process is gone (UCX does not watch peers on the same machine). The arena watches their
// processes: the survivors must fail with the peer's failure long before the deadline, not at it.
TEST(Failures, ACoHostPeerWhoseProcessEndsFailsTheWaitersLongBeforeTheDeadline) {
  auto failures = runRanks(
      3,
      [](const RankContext& ctx) {
        Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
        // As the plugin runs each collective: the ranks agree on it first. After the group's first
        // agreement (in messages), they agree through their arena, whatever the collective's size.
        const CallSignature mine("allreduce", "float32", 1024);
        {
          Collective c(comm, 0, milliseconds(20000));
          HIER_CHECK(agree(c, &mine).agreed(), "the first agreement failed");
        }
        if (ctx.rank == 2) _exit(0);  // gone before the next agreement, where the others wait for it
        auto start = Clock::now();
        Collective c(comm, 1, milliseconds(20000));
        Error error = expectError([&] { agree(c, &mine); });
        HIER_CHECK(error.kind() == ErrorKind::PeerFailure, error.what());
        HIER_CHECK(error.peers() == std::vector<int>{2}, error.what());
        HIER_CHECK(std::string(error.what()).find("rank 2's process ended") != std::string::npos, error.what());
        HIER_CHECK(seconds(start) < 2.0, "took " << seconds(start) << " s, against a deadline of 20 s");
      },
      std::chrono::seconds(60), {2});
  EXPECT_EQ(failures, "");
}

// A rank that dies before its host's ranks have set up their shared-memory arena (during a group's first
// collective, where they exchange their segments through the store) must not hold the others to the
// deadline either. Here it is gone, and reaped, before anyone looked at its process: nothing can watch
// it any more, and the pid it published names no process. `learned`: whether it took part in the
// exchange of the ranks' records (topology()) before it died; if not, that exchange is what fails.
void aCoHostPeerDiesBeforeTheArenaIsSetUp(bool learned) {
  auto failures = runRanks(
      3,
      [learned](const RankContext& ctx) {
        Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
        if (learned) comm.topology(Deadline::after(milliseconds(20000)));
        if (ctx.rank == 2) {
          const std::string pid = std::to_string(getpid());
          ctx.bootstrap->set("pid", std::vector<uint8_t>(pid.begin(), pid.end()));
          _exit(0);
        }
        const auto published = ctx.bootstrap->get("pid", milliseconds(20000));
        const pid_t pid = pid_t(std::stol(std::string(published.begin(), published.end())));
        // The test's parent reaps it (within its polling interval); then no process has its pid.
        for (auto until = Clock::now() + std::chrono::seconds(10); kill(pid, 0) == 0 && Clock::now() < until;) {
          std::this_thread::sleep_for(milliseconds(10));
        }
        HIER_CHECK(kill(pid, 0) != 0 && errno == ESRCH, "rank 2's process " << pid << " was not reaped in 10 s");
        auto start = Clock::now();
        Error error = expectError([&] { comm.arena(Deadline::after(milliseconds(20000))); });
        const double took = seconds(start);
        // Neither survivor ends before both have failed: a survivor that had would be a second dead peer.
        const std::string done = "failed" + std::to_string(ctx.rank);
        ctx.bootstrap->set(done, std::vector<uint8_t>{1});
        ctx.bootstrap->get("failed" + std::to_string(1 - ctx.rank), milliseconds(20000));
        HIER_CHECK(error.kind() == ErrorKind::PeerFailure, error.what());
        HIER_CHECK(error.peers() == std::vector<int>{2}, error.what());
        const std::string what = error.what();
        if (learned) {
          HIER_CHECK(what.find("rank 2's process ended") != std::string::npos, what);
          HIER_CHECK(what.find("setting up shared memory") != std::string::npos, what);
        } else {
          HIER_CHECK(what.find("rank 2") != std::string::npos && what.find("process ended") != std::string::npos, what);
        }
        HIER_CHECK(took < 2.0, "took " << took << " s, against a deadline of 20 s");
      },
      std::chrono::seconds(60), {2});
  EXPECT_EQ(failures, "");
}

TEST(Failures, ACoHostPeerThatDiesBeforeTheArenaIsSetUpFailsTheSetupLongBeforeTheDeadline) {
  aCoHostPeerDiesBeforeTheArenaIsSetUp(/*learned=*/true);
}

TEST(Failures, ACoHostPeerThatDiesBeforeTheRanksLearnEachOtherFailsTheFirstCollectiveLongBeforeTheDeadline) {
  aCoHostPeerDiesBeforeTheArenaIsSetUp(/*learned=*/false);
}

// The same for a rank that waits in a message (point to point, or a small collective's data past its
// agreement), which UCX carries between the ranks of one host without telling them that a peer is gone.
// UCX's engine watches the processes of its peers on this machine.
TEST(Failures, AReceiveFromACoHostPeerWhoseProcessEndsFailsLongBeforeTheDeadline) {
  auto failures =
      runRanks(2,
               [](const RankContext& ctx) {
                 Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
                 std::vector<float> data(256, float(ctx.rank));
                 {
                   // Rank 0 only receives: its engine watches rank 1 from its first receive on, made while rank 1
                   // is surely there (it waits for word that the receive is done).
                   Collective c(comm, 0, milliseconds(20000));
                   if (ctx.rank == 0) {
                     c.wait(c.receive(1, data.data(), data.size() * sizeof(float)));
                     ctx.bootstrap->set("received", {1});
                   } else {
                     c.wait(c.send(0, data.data(), data.size() * sizeof(float)));
                     ctx.bootstrap->get("received", milliseconds(20000));
                   }
                   HIER_CHECK(data.front() == 1.0f, "received " << data.front());
                 }
                 if (ctx.rank == 1) _exit(0);
                 auto start = Clock::now();
                 Collective c(comm, 1, milliseconds(20000));
                 Error error = expectError([&] { c.wait(c.receive(1, data.data(), data.size() * sizeof(float))); });
                 HIER_CHECK(error.kind() == ErrorKind::PeerFailure, error.what());
                 HIER_CHECK(error.peers() == std::vector<int>{1}, error.what());
                 HIER_CHECK(std::string(error.what()).find("process ended") != std::string::npos, error.what());
                 HIER_CHECK(seconds(start) < 2.0, "took " << seconds(start) << " s, against a deadline of 20 s");
               },
               std::chrono::seconds(60), {1});
  EXPECT_EQ(failures, "");
}

// A process being killed closes its files, its shared memory with them, before its pidfd turns readable:
// a peer whose send into that memory fails in between must still see the process end (500 kill rounds
// once reported one such failure as this rank's own "Shared memory error"). The child here stands for a
// process on its way out.
TEST(Failures, AProcessOnItsWayOutIsSeenToEndWithinTheWait) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    usleep(300 * 1000);
    _exit(0);
  }
  const int pidfd = watchProcess({int64_t(child), thisProcess().pidNamespace});
  ASSERT_GE(pidfd, 0);
  EXPECT_FALSE(processEnded(pidfd));
  EXPECT_FALSE(processEndsWithin(pidfd, 20));
  auto start = Clock::now();
  EXPECT_TRUE(processEndsWithin(pidfd, 5000));
  EXPECT_LT(seconds(start), 2.0);
  EXPECT_TRUE(processEnded(pidfd));  // a zombie counts as ended, before and after it is reaped
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(processEnded(pidfd));
  close(pidfd);
}

// The ranks pose as two hosts, so UCX carries everything; without CMA and with the reading rendezvous
// (hier's default where UCX carries host memory only, set here explicitly), UCX has nothing but shared
// memory between them and sends eagerly at every size. Rank 0's sends to the dead rank 1 fill its
// queue and are then retried on every call to the worker, which counts each retry as progress. The
// deadline must end the wait all the same (it once did not: the waiting loops looked at the clock only
// when UCX reported nothing to do, and this hung 3 runs in 4).
TEST(Failures, SendsIntoADeadPeersFullQueueFailInTime) {
  auto failures =
      runRanks(2,
               [](const RankContext& ctx) {
                 setenv("HIER_HOST_ID", ctx.rank == 0 ? "host-A" : "host-B", 1);
                 setenv("UCX_TLS", "^cma", 1);
                 setenv("UCX_RNDV_SCHEME", "get_zcopy", 1);
                 Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
                 std::vector<float> data(1 << 20, 1.0f);
                 {
                   Collective c(comm, 0, milliseconds(10000));
                   allreduce(c, view(data), ReduceOp::Sum);
                   HIER_CHECK(data.front() == 2.0f && data.back() == 2.0f, data.front() << ", " << data.back());
                 }
                 if (ctx.rank == 1) _exit(0);
                 auto start = Clock::now();
                 Collective c(comm, 1, milliseconds(2000));
                 Error error = expectError([&] { allreduce(c, view(data), ReduceOp::Sum); });
                 HIER_CHECK(error.kind() == ErrorKind::PeerFailure || error.kind() == ErrorKind::Timeout, error.what());
                 HIER_CHECK(seconds(start) < 3.5, "took " << seconds(start) << " s for a 2 s deadline");
               },
               std::chrono::seconds(30), {1});
  EXPECT_EQ(failures, "");
}

TEST(Failures, SizeMismatchIsReportedNotHung) {
  auto failures = runRanks(2, [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    std::vector<float> data(ctx.rank == 0 ? 100 : 50, 1.0f);
    Collective c(comm, 0, milliseconds(2000));
    if (ctx.rank == 0) {
      try {
        broadcast(c, view(data), 0);  // may complete (eager send) or time out; either is fine here
      } catch (const Error&) {
      }
      return;
    }
    Error error = expectError([&] { broadcast(c, view(data), 0); });
    HIER_CHECK(error.kind() == ErrorKind::Mismatch, toString(error.kind()) << ": " << error.what());
    HIER_CHECK(std::string(error.what()).find("matching sizes") != std::string::npos, error.what());
  });
  EXPECT_EQ(failures, "");
}

// An all-to-all across 2 simulated hosts (pairwise) where rank 2 expects fewer elements from rank 0 than
// rank 0 sends it: every rank refuses the call alike, not only rank 2, before any data moved, and the
// group runs the next all-to-all correctly.
TEST(Failures, AlltoallAcrossHostsWithMismatchedSplitsFailsOnEveryRank) {
  auto failures = runRanks(3, [](const RankContext& ctx) {
    setenv("HIER_HOST_ID", ctx.rank < 2 ? "host-A" : "host-B", 1);
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    auto run = [&](uint64_t seq, bool mismatched) {
      std::vector<std::vector<float>> sent(3), received(3);
      std::vector<Buffer> ins, outs;
      for (int p = 0; p < 3; ++p) {
        sent[size_t(p)].assign(1000, float(10 * ctx.rank + p));
        received[size_t(p)].assign(mismatched && ctx.rank == 2 && p == 0 ? 999 : 1000, -1.0f);
        ins.push_back(view(sent[size_t(p)]));
        outs.push_back(view(received[size_t(p)]));
      }
      Collective c(comm, seq, milliseconds(5000));
      alltoall(c, ins, outs);
      for (int p = 0; p < 3; ++p) {
        HIER_CHECK(received[size_t(p)].front() == float(10 * p + ctx.rank), "from " << p);
      }
    };
    Error error = expectError([&] { run(0, true); });
    HIER_CHECK(error.kind() == ErrorKind::InvalidUsage, toString(error.kind()) << ": " << error.what());
    run(1, false);
  });
  EXPECT_EQ(failures, "");
}

TEST(Failures, AbortWakesAWaitingCollective) {
  auto failures = runRanks(2, [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    if (ctx.rank == 1) {
      std::this_thread::sleep_for(milliseconds(2000));
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(milliseconds(300));
      comm.abort("aborted by the test");
    });
    auto start = Clock::now();
    std::vector<float> data(10, 1.0f);
    Collective c(comm, 0, milliseconds(60000));
    Error error = expectError([&] { allreduce(c, view(data), ReduceOp::Sum); });
    aborter.join();
    HIER_CHECK(error.kind() == ErrorKind::Aborted, toString(error.kind()) << ": " << error.what());
    HIER_CHECK(seconds(start) < 1.5, "abort took " << seconds(start) << " s");
    // Later operations fail at once.
    Collective again(comm, 1, milliseconds(60000));
    Error later = expectError([&] { allreduce(again, view(data), ReduceOp::Sum); });
    HIER_CHECK(later.kind() == ErrorKind::Aborted, later.what());
  });
  EXPECT_EQ(failures, "");
}

// Past the size where ranks of a host meet in shared memory (unless a variant moves it), a rank waits on
// a peer's counter there, asleep, not on UCX: an abort must reach it too, at once and with its reason.
TEST(Failures, AbortWakesALargeCollectiveWithItsReason) {
  auto failures = runRanks(2, [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    std::vector<float> data(1 << 20, 1.0f);  // 4 MiB
    {
      Collective warmup(comm, 0, milliseconds(10000));  // both ranks set the arena up
      allreduce(warmup, view(data), ReduceOp::Sum);
    }
    if (ctx.rank == 1) {
      std::this_thread::sleep_for(milliseconds(2000));
      return;
    }
    Clock::time_point aborted;
    std::thread aborter([&] {
      std::this_thread::sleep_for(milliseconds(300));
      aborted = Clock::now();
      comm.abort("aborted by the test");
    });
    Collective c(comm, 1, milliseconds(60000));
    Error error = expectError([&] { allreduce(c, view(data), ReduceOp::Sum); });
    const auto ended = Clock::now();
    aborter.join();
    const double late = std::chrono::duration<double>(ended - aborted).count();
    HIER_CHECK(error.kind() == ErrorKind::Aborted, toString(error.kind()) << ": " << error.what());
    HIER_CHECK(std::string(error.what()).find("aborted by the test") != std::string::npos, error.what());
    HIER_CHECK(late < 1.0, "the wait ended " << late << " s after the abort");
  });
  EXPECT_EQ(failures, "");
}

TEST(Failures, WaitingDoesNotBurnACore) {
  auto failures = runRanks(2, [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    std::vector<float> data(10, 1.0f);
    {
      Collective warmup(comm, 0, milliseconds(10000));
      allreduce(warmup, view(data), ReduceOp::Sum);
    }
    if (ctx.rank == 1) std::this_thread::sleep_for(milliseconds(1500));
    double cpuBefore = cpuSeconds();
    auto start = Clock::now();
    Collective c(comm, 1, milliseconds(10000));
    allreduce(c, view(data), ReduceOp::Sum);
    if (ctx.rank == 0) {
      double waited = seconds(start), used = cpuSeconds() - cpuBefore;
      HIER_CHECK(waited > 1.0, "rank 0 did not wait: " << waited << " s");
      // Spinning would use about `waited` seconds of CPU; sleeping uses almost none.
      HIER_CHECK(used < 0.2 * waited, "used " << used << " s of CPU while waiting " << waited << " s");
    }
  });
  EXPECT_EQ(failures, "");
}

// A thread asleep on UCX's wakeup fd (the leading waiter) must wake when another thread settles what it
// waits for: that thread consumed the UCX events, or there were none (a failure, an abort). Before, the
// waiter slept on to the end of its tick, 100 ms; between simulated hosts that showed as 40-100 ms
// stalls. Twenty rounds make the difference plain: about 2 s asleep to the tick against about 0.1 s.
TEST(Failures, ARequestSettledByAnotherThreadWakesItsWaiter) {
  constexpr int kRounds = 20;
  std::vector<uint64_t> words(kRounds);  // outlive the engine, and so whatever UCX holds
  auto engine = ucx::Engine::acquire("wake-test");
  const auto start = Clock::now();
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t tag = 0xfeed0000u + uint64_t(round);  // matches nothing anybody sends
    auto request = engine->receive({&words[size_t(round)], sizeof(uint64_t), MemoryType::Host, tag, /*peer=*/1,
                                    Clock::now() + std::chrono::seconds(60), nullptr, nullptr},
                                   ~uint64_t(0), -1);
    std::thread failer([&] {
      std::this_thread::sleep_for(milliseconds(5));  // the waiter spins 50 us, then sleeps
      engine->fail(*request, ErrorKind::Aborted, "failed by the test");
    });
    engine->wait(request);
    failer.join();
    ASSERT_TRUE(request->done() && !request->succeeded());
    EXPECT_EQ(request->errorKind(), ErrorKind::Aborted);
  }
  const double waited = seconds(start);
  EXPECT_LT(waited, 1.0) << kRounds << " waits took " << waited << " s: the waiter slept past the settling";
}

TEST(PointToPoint, TagsKeepMessagesApartAndAnySourceReportsTheSender) {
  auto failures = runRanks(3, [](const RankContext& ctx) {
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 7, "p2p");
    Communicator& comm = group.communicator();
    const Deadline deadline = Deadline::after(std::chrono::seconds(20));
    auto message = [&](int peer, uint32_t tag, float& value) {
      return PointToPoint{peer, tag, &value, sizeof value, MemoryType::Host, deadline, nullptr, nullptr};
    };
    if (ctx.rank != 0) {
      // Each sender sends tag 5 then tag 9; rank 0 receives them in the opposite order.
      float five = 5.0f * float(ctx.rank), nine = 9.0f * float(ctx.rank), eleven = 11.0f * float(ctx.rank);
      auto a = send(comm, message(0, 5, five));
      auto b = send(comm, message(0, 9, nine));
      auto c = send(comm, message(0, 11, eleven));
      for (auto* t : {&a, &b, &c}) {
        (*t)->wait();
        HIER_CHECK((*t)->outcome().succeeded, "send failed: " << (*t)->outcome().message);
      }
      return;
    }
    for (int source : {1, 2}) {
      float nine = 0, five = 0;
      auto r9 = receive(comm, message(source, 9, nine));
      auto r5 = receive(comm, message(source, 5, five));
      r9->wait();
      r5->wait();
      HIER_CHECK(nine == 9.0f * float(source) && five == 5.0f * float(source), "source " << source);
      HIER_CHECK(r9->outcome().source == source, "the sender of a receive from rank " << source);
    }
    // Any source: a third message from each, tag 11; the hook hears of it too.
    std::vector<int> seen;
    for (int k = 0; k < 2; ++k) {
      float v = 0;
      std::atomic<int> heard{-1};
      auto any = message(-1, 11, v);
      any.onSettled = [&heard](const TransferOutcome& outcome) { heard = outcome.source; };
      auto r = receive(comm, any);
      r->wait();
      seen.push_back(r->outcome().source);
      HIER_CHECK(heard.load() == seen.back(), "the hook heard of rank " << heard.load());
      HIER_CHECK(v == 11.0f * float(seen.back()), "any-source value");
    }
    std::sort(seen.begin(), seen.end());
    HIER_CHECK((seen == std::vector<int>{1, 2}), "any-source senders");
  });
  EXPECT_EQ(failures, "");
}

TEST(PointToPoint, AReceiveNobodyAnswersFailsAtItsDeadline) {
  auto failures = runRanks(2, [](const RankContext& ctx) {
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 8, "p2p");
    if (ctx.rank == 1) {
      // There, but silent: a peer whose process ended fails a receive sooner
      // (Failures.AReceiveFromACoHostPeerWhoseProcessEndsFailsLongBeforeTheDeadline).
      ctx.bootstrap->get("done", std::chrono::seconds(20));
      return;
    }
    float v = 0;
    auto start = Clock::now();
    auto r =
        receive(group.communicator(), PointToPoint{1, 3, &v, sizeof v, MemoryType::Host,
                                                   Deadline::after(std::chrono::milliseconds(500)), nullptr, nullptr});
    r->wait();
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    HIER_CHECK(!r->outcome().succeeded && r->outcome().kind == ErrorKind::Timeout,
               "outcome: " << toString(r->outcome().kind) << " " << r->outcome().message);
    HIER_CHECK(waited > 0.4 && waited < 3.0, "failed after " << waited << " s, deadline 0.5 s");
    ctx.bootstrap->set("done", {1});
  });
  EXPECT_EQ(failures, "");
}

}  // namespace
}  // namespace hier::transport

namespace hier::transport {
namespace {

TEST(Failures, ANoticeReachesEveryOtherRank) {
  auto failures = runRanks(3, [](const RankContext& ctx) {
    Group group(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    std::atomic<int> heardFrom{-1};
    std::string heard;
    std::mutex mutex;
    group.listen([&](int from, const std::string& text) {
      std::lock_guard<std::mutex> lock(mutex);
      heard = text;
      heardFrom.store(from);
    });
    {  // everyone connected
      std::vector<float> data(8, 1.0f);
      Collective c(group, 0, milliseconds(5000));
      allreduce(c, view(data), ReduceOp::Sum);
    }
    if (ctx.rank == 0) {
      group.tell("allreduce seq 1 failed on rank 0: a test", Deadline::after(milliseconds(1000)));
      std::this_thread::sleep_for(milliseconds(500));
      return;
    }
    auto start = Clock::now();
    while (heardFrom.load() < 0 && seconds(start) < 5) std::this_thread::sleep_for(milliseconds(5));
    HIER_CHECK(heardFrom.load() == 0, "no notice within 5 s; " << group.communicator().engine().describe());
    std::lock_guard<std::mutex> lock(mutex);
    HIER_CHECK(heard == "allreduce seq 1 failed on rank 0: a test", heard);
  });
  EXPECT_EQ(failures, "");
}

}  // namespace
}  // namespace hier::transport
