// Every collective of the transport on 1 to 4 real processes over real UCX, checked against values each
// rank computes on its own. Sizes cross the algorithm switch points and the pipeline fragment size.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "tests/transport/multiprocess.h"
#include "tests/transport/values.h"
#include "transport/arena/node_arena.h"
#include "transport/base/error.h"
#include "transport/base/tag.h"
#include "transport/group/collective.h"
#include "transport/group/group.h"
#include "transport/group/record_exchange.h"
#include "transport/select/algorithm_table.h"
#include "transport/select/dispatch.h"

namespace hier::transport {
namespace {

using testing::expectedReduction;
using testing::RankContext;
using testing::runRanks;
using testing::value;
using testing::view;

// Sizes in elements: empty, one, fewer than ranks, small, and large enough for the ring algorithms
// with several pipeline fragments and blocks that do not divide evenly.
const size_t kSizes[] = {0, 1, 3, 1000, 300001};
constexpr std::chrono::milliseconds kTimeout{20000};

class Collectives : public ::testing::TestWithParam<int> {};

// Once with the default rule, then with each algorithm of the table that applies on one host forced (at
// the sizes where it does not apply, the default runs again): each meets every reduction and both dtypes.
TEST_P(Collectives, AllreduceSumAvgMaxAndProduct) {
  auto failures = runRanks(GetParam(), [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    uint64_t seq = 0;
    Shape oneHost{size_t(1) << 20, size_t(1) << 18, ctx.size, &comm.topology(Deadline::after(kTimeout))};
    oneHost.arenaReady = [] { return true; };
    oneHost.crossMemoryAttach = [] { return true; };
    std::vector<std::string> forced{""};
    for (const auto& algorithm : allreduceTable()) {
      if (algorithm.serves(oneHost.memory) && algorithm.applies(oneHost))
        forced.push_back("allreduce=" + std::string(algorithm.name));
    }
    for (const std::string& algorithms : forced) {
      setAlgorithms(algorithms);
      for (size_t count : kSizes) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
          std::vector<float> data(count);
          for (size_t i = 0; i < count; ++i) data[i] = value(ctx.rank, i);
          Collective c(comm, seq++, kTimeout);
          allreduce(c, view(data), op);
          for (size_t i = 0; i < count; ++i) {
            const float expected = expectedReduction(op, ctx.size, i);
            HIER_CHECK(data[i] == expected, lastChosenAlgorithm << " " << toString(op) << " count " << count
                                                                << " index " << i << ": got " << data[i]
                                                                << ", expected " << expected);
          }
        }
        // Integer product: wraps, and is a second dtype.
        std::vector<int64_t> ints(count);
        for (size_t i = 0; i < count; ++i) ints[i] = int64_t(ctx.rank + 2) * int64_t(i + 1);
        Collective c(comm, seq++, kTimeout);
        allreduce(c, Buffer{ints.data(), count, DataType::Int64, MemoryType::Host}, ReduceOp::Product);
        for (size_t i = 0; i < count; ++i) {
          uint64_t expected = 1;
          for (int r = 0; r < ctx.size; ++r) expected *= uint64_t(r + 2) * uint64_t(i + 1);
          HIER_CHECK(uint64_t(ints[i]) == expected,
                     lastChosenAlgorithm << " product count " << count << " index " << i);
        }
      }
    }
    setAlgorithms("");
  });
  EXPECT_EQ(failures, "");
}

TEST_P(Collectives, ReduceToEveryRoot) {
  auto failures = runRanks(GetParam(), [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    uint64_t seq = 0;
    for (size_t count : kSizes) {
      for (int root = 0; root < ctx.size; ++root) {
        std::vector<float> input(count), output(count, -1.0f);
        for (size_t i = 0; i < count; ++i) input[i] = value(ctx.rank, i);
        auto original = input;
        Collective c(comm, seq++, kTimeout);
        reduce(c, view(input), view(output), ReduceOp::Sum, root);
        HIER_CHECK(input == original, "reduce modified its input on rank " << ctx.rank);
        if (ctx.rank != root) continue;
        for (size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int r = 0; r < ctx.size; ++r) expected += value(r, i);
          HIER_CHECK(output[i] == expected, "root " << root << " count " << count << " index " << i);
        }
      }
    }
  });
  EXPECT_EQ(failures, "");
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  auto failures = runRanks(GetParam(), [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    uint64_t seq = 0;
    for (size_t count : kSizes) {
      for (int root = 0; root < ctx.size; ++root) {
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = value(ctx.rank, i);
        Collective c(comm, seq++, kTimeout);
        broadcast(c, view(data), root);
        for (size_t i = 0; i < count; ++i) HIER_CHECK(data[i] == value(root, i), "root " << root << " index " << i);
      }
    }
  });
  EXPECT_EQ(failures, "");
}

TEST_P(Collectives, AllgatherWithUnevenParts) {
  auto failures = runRanks(GetParam(), [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    uint64_t seq = 0;
    for (size_t count : kSizes) {
      // Rank r contributes count + r elements (uneven parts, as the list forms allow).
      auto partSize = [&](int r) { return count + size_t(r); };
      std::vector<float> input(partSize(ctx.rank));
      for (size_t i = 0; i < input.size(); ++i) input[i] = value(ctx.rank, i);
      std::vector<std::vector<float>> outputs(size_t(ctx.size));
      std::vector<Buffer> views;
      for (int r = 0; r < ctx.size; ++r) {
        outputs[size_t(r)].assign(partSize(r), -1.0f);
        views.push_back(view(outputs[size_t(r)]));
      }
      Collective c(comm, seq++, kTimeout);
      allgather(c, view(input), views);
      for (int r = 0; r < ctx.size; ++r) {
        for (size_t i = 0; i < partSize(r); ++i) {
          HIER_CHECK(outputs[size_t(r)][i] == value(r, i), "part " << r << " index " << i << " count " << count);
        }
      }
    }
  });
  EXPECT_EQ(failures, "");
}

TEST_P(Collectives, ReduceScatterWithUnevenBlocks) {
  auto failures = runRanks(GetParam(), [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    uint64_t seq = 0;
    for (size_t count : kSizes) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min}) {
        // Block b holds count + 2b elements; element j of block b is value(rank, j + 100 b).
        std::vector<std::vector<float>> inputs(size_t(ctx.size));
        std::vector<Buffer> views;
        for (int b = 0; b < ctx.size; ++b) {
          for (size_t j = 0; j < count + size_t(2 * b); ++j)
            inputs[size_t(b)].push_back(value(ctx.rank, j + 100 * size_t(b)));
          views.push_back(view(inputs[size_t(b)]));
        }
        auto original = inputs;
        std::vector<float> output(count + size_t(2 * ctx.rank), -1.0f);
        Collective c(comm, seq++, kTimeout);
        reduceScatter(c, views, view(output), op);
        HIER_CHECK(inputs == original, "reduce_scatter modified its input");
        for (size_t j = 0; j < output.size(); ++j) {
          size_t i = j + 100 * size_t(ctx.rank);
          const float expected = expectedReduction(op, ctx.size, i);
          HIER_CHECK(output[j] == expected, toString(op) << " count " << count << " index " << j);
        }
      }
    }
  });
  EXPECT_EQ(failures, "");
}

TEST_P(Collectives, GatherAndScatterEveryRoot) {
  auto failures = runRanks(GetParam(), [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    uint64_t seq = 0;
    for (size_t count : {size_t(0), size_t(5), size_t(70000)}) {
      for (int root = 0; root < ctx.size; ++root) {
        std::vector<float> input(count);
        for (size_t i = 0; i < count; ++i) input[i] = value(ctx.rank, i);
        std::vector<std::vector<float>> parts(size_t(ctx.size), std::vector<float>(count, -1.0f));
        std::vector<Buffer> views;
        for (auto& part : parts) views.push_back(view(part));
        {
          Collective c(comm, seq++, kTimeout);
          gather(c, view(input), ctx.rank == root ? views : std::vector<Buffer>{}, root);
        }
        if (ctx.rank == root) {
          for (int r = 0; r < ctx.size; ++r) {
            for (size_t i = 0; i < count; ++i) HIER_CHECK(parts[size_t(r)][i] == value(r, i), "gather part " << r);
          }
        }
        // Scatter back what the root gathered: every rank must get its own values again.
        std::vector<float> output(count, -1.0f);
        {
          Collective c(comm, seq++, kTimeout);
          scatter(c, ctx.rank == root ? views : std::vector<Buffer>{}, view(output), root);
        }
        for (size_t i = 0; i < count; ++i) HIER_CHECK(output[i] == value(ctx.rank, i), "scatter index " << i);
      }
    }
  });
  EXPECT_EQ(failures, "");
}

TEST_P(Collectives, AlltoallWithUnevenAndEmptySplits) {
  auto failures = runRanks(GetParam(), [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    uint64_t seq = 0;
    // The largest scale takes several of the shared-memory arena's chunks at every world size.
    for (size_t scale : {size_t(1), size_t(40000), size_t(150000)}) {
      // Rank s sends (s + d) % 3 * scale elements to rank d: some parts are empty.
      auto split = [&](int s, int d) { return size_t((s + d) % 3) * scale; };
      std::vector<std::vector<float>> inputs(size_t(ctx.size)), outputs(size_t(ctx.size));
      std::vector<Buffer> in, out;
      for (int p = 0; p < ctx.size; ++p) {
        for (size_t i = 0; i < split(ctx.rank, p); ++i) inputs[size_t(p)].push_back(value(ctx.rank, i) + float(p));
        outputs[size_t(p)].assign(split(p, ctx.rank), -1.0f);
        in.push_back(view(inputs[size_t(p)]));
        out.push_back(view(outputs[size_t(p)]));
      }
      Collective c(comm, seq++, kTimeout);
      alltoall(c, in, out);
      for (int p = 0; p < ctx.size; ++p) {
        for (size_t i = 0; i < outputs[size_t(p)].size(); ++i) {
          HIER_CHECK(outputs[size_t(p)][i] == value(p, i) + float(ctx.rank), "from rank " << p << " index " << i);
        }
      }
    }
  });
  EXPECT_EQ(failures, "");
}

TEST_P(Collectives, BarrierAndManyOperationsInSequence) {
  auto failures = runRanks(GetParam(), [](const RankContext& ctx) {
    Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    for (uint64_t seq = 0; seq < 200; ++seq) {
      Collective c(comm, seq, kTimeout);
      if (seq % 2) {
        barrier(c);
      } else {
        std::vector<float> one{float(ctx.rank)};
        allreduce(c, view(one), ReduceOp::Sum);
        HIER_CHECK(one[0] == float(ctx.size * (ctx.size - 1) / 2), "iteration " << seq);
      }
    }
  });
  EXPECT_EQ(failures, "");
}

// Bruck's all-gather, followed on paper for every size up to 70: after its steps every rank holds
// every record once, in ceil(log2 n) steps, each passing what the sender holds and the receiver lacks.
TEST(RecordExchange, BrucksStepsGiveEveryRankEveryRecordInLogSteps) {
  for (int n = 1; n <= 70; ++n) {
    const auto steps = bruckSteps(n);
    int log2 = 0;
    while ((1 << log2) < n) ++log2;
    EXPECT_EQ(int(steps.size()), log2) << n << " ranks";
    // held[r]: the ranks whose records rank r holds, in holding order.
    std::vector<std::vector<int>> held(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) held[size_t(r)] = {r};
    for (const auto& step : steps) {
      auto before = held;
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(int(before[size_t(r)].size()), step.distance) << n << " ranks";
        const auto& from = before[size_t((r + step.distance) % n)];
        held[size_t(r)].insert(held[size_t(r)].end(), from.begin(), from.begin() + step.count);
      }
    }
    for (int r = 0; r < n; ++r) {
      std::vector<int> expected;
      for (int i = 0; i < n; ++i) expected.push_back((r + i) % n);
      EXPECT_EQ(held[size_t(r)], expected) << "rank " << r << " of " << n;
    }
  }
}

TEST(RecordExchange, ARecordSurvivesEncodingAndBadBytesAreRefused) {
  const PeerRecord record{"host-A", {1, 2, 3, 0, 255}};
  const PeerRecord back = decodeRecord(encodeRecord(record));
  EXPECT_EQ(back.host, record.host);
  EXPECT_EQ(back.address, record.address);
  EXPECT_THROW(decodeRecord({1, 0}), Error);
  EXPECT_THROW(decodeRecord({9, 0, 0, 0, 'a'}), Error);
}

class RecordExchangeOnRanks : public ::testing::TestWithParam<int> {};

// Records of a different length on every rank (the lengths travel first), each rank's own content.
TEST_P(RecordExchangeOnRanks, EveryRankGetsEveryRanksRecord) {
  auto failures = runRanks(GetParam(), [](const RankContext& ctx) {
    Communicator comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "test");
    auto recordOf = [](int rank) {
      std::vector<uint8_t> record(size_t(1 + 37 * rank));
      for (size_t i = 0; i < record.size(); ++i) record[i] = uint8_t(rank * 31 + i);
      return record;
    };
    const uint64_t lengths = makeTag(7, true, 3, 0), records = makeTag(7, true, 4, 0);
    const auto all = exchangeRecords(comm, recordOf(ctx.rank), lengths, records, Deadline::after(kTimeout));
    HIER_CHECK(int(all.size()) == ctx.size, all.size() << " records");
    for (int r = 0; r < ctx.size; ++r) HIER_CHECK(all[size_t(r)] == recordOf(r), "rank " << r << "'s record");
  });
  EXPECT_EQ(failures, "");
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, RecordExchangeOnRanks, ::testing::Values(1, 2, 3, 5, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "ranks" + std::to_string(info.param); });

TEST(Collectives, TwoCommunicatorsOverTheSamePeersDoNotMix) {
  auto failures = runRanks(3, [](const RankContext& ctx) {
    // Same processes, two groups (ids 1 and 2), same sequence numbers, run back to back.
    Group a(ctx.bootstrap->withPrefix("a/"), ctx.rank, ctx.size, 1, "a");
    Group b(ctx.bootstrap->withPrefix("b/"), (ctx.rank + 1) % ctx.size, ctx.size, 2, "b");
    std::vector<float> x{1.0f}, y{float(ctx.rank)};
    {
      Collective ca(a, 0, kTimeout);
      allreduce(ca, view(x), ReduceOp::Sum);
    }
    {
      Collective cb(b, 0, kTimeout);
      allreduce(cb, view(y), ReduceOp::Max);
    }
    HIER_CHECK(x[0] == 3.0f, "group a");
    HIER_CHECK(y[0] == 2.0f, "group b");
  });
  EXPECT_EQ(failures, "");
}

// Where the kernel lets a process read its siblings' memory (no Yama, or ptrace_scope 0), the arena must
// find cross-memory attach, or the single_copy algorithms would be passed over without a word.
TEST(SharedMemory, CrossMemoryAttachIsFoundWhereTheKernelAllowsIt) {
  std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  if (yama && !(yama >> scope)) scope = -1;
  if (scope != 0) GTEST_SKIP() << "Yama's ptrace_scope is " << scope << ": siblings may not read each other's memory";
  auto failures = runRanks(3, [](const RankContext& ctx) {
    auto arena = NodeArena::create(*ctx.bootstrap, ctx.rank, ctx.size, 4096, Deadline::after(kTimeout));
    HIER_CHECK(arena != nullptr, "no arena");
    HIER_CHECK(arena->crossMemoryAttach(), "cross-memory attach not found");
    // The timing of one copy against two is rank 1's, taken by all: every rank must choose alike.
    const std::vector<uint8_t> verdict{uint8_t(arena->singleCopyFast()), uint8_t(arena->coreForEachRank())};
    ctx.bootstrap->set("verdict/" + std::to_string(ctx.rank), verdict);
    for (int r = 0; r < ctx.size; ++r) {
      HIER_CHECK(ctx.bootstrap->get("verdict/" + std::to_string(r), kTimeout) == verdict,
                 "rank " << r << " timed single copy otherwise");
    }
    // And it reads what a peer published, the peer's own bytes.
    std::vector<uint32_t> mine(1000, uint32_t(ctx.rank + 1)), theirs(1000, 0);
    arena->publish(mine.data(), mine.size() * sizeof(uint32_t));
    arena->post(NodeArena::Posted, 1);
    const int peer = (ctx.rank + 1) % ctx.size;
    arena->waitOne(peer, NodeArena::Posted, 1, Deadline::after(kTimeout));
    arena->readFrom(peer, theirs.data(), theirs.size() * sizeof(uint32_t));
    HIER_CHECK(theirs.front() == uint32_t(peer + 1) && theirs.back() == uint32_t(peer + 1), "read " << theirs.front());
    // A size other than the one published is refused, naming the rank.
    auto refusedAsMismatch = [](const std::function<void()>& call) {
      try {
        call();
      } catch (const Error& error) {
        return error.kind() == ErrorKind::Mismatch;
      }
      return false;
    };
    HIER_CHECK(refusedAsMismatch([&] { arena->readFrom(peer, theirs.data(), 8); }),
               "a read of another size than published was not refused");
    // Parts of it, both ways: the peer's last 100 values read, 7s written over its first 10.
    const size_t whole = mine.size() * sizeof(uint32_t);
    std::vector<uint32_t> tail(100, 0);
    arena->readPartFrom(peer, 900 * sizeof(uint32_t), tail.data(), tail.size() * sizeof(uint32_t), whole);
    HIER_CHECK(tail.front() == uint32_t(peer + 1) && tail.back() == uint32_t(peer + 1), "read part " << tail.front());
    const std::vector<uint32_t> sevens(10, 7);
    arena->writeInto(peer, 0, sevens.data(), sevens.size() * sizeof(uint32_t), whole);
    HIER_CHECK(refusedAsMismatch([&] { arena->writeInto(peer, 0, sevens.data(), 4, 8); }),
               "a write into a buffer published at another size was not refused");
    arena->post(NodeArena::Released, 1);
    arena->waitAll(NodeArena::Released, 1, Deadline::after(kTimeout));
    // Every rank's predecessor wrote into it by now: 7s, then its own values untouched.
    HIER_CHECK(mine[0] == 7 && mine[9] == 7 && mine[10] == uint32_t(ctx.rank + 1) && mine[999] == mine[10],
               "after the write: " << mine[0] << " " << mine[9] << " " << mine[10]);

    // A part for each peer, of sizes that differ: each reads the one meant for it, from its slot's table.
    std::vector<std::vector<uint32_t>> parts;
    std::vector<Buffer> table;
    for (int to = 0; to < ctx.size; ++to) parts.emplace_back(size_t(10 + to), uint32_t(100 * ctx.rank + to));
    for (auto& part : parts) table.push_back(Buffer{part.data(), part.size() * sizeof(uint32_t)});
    arena->publishParts(1, table);
    arena->post(NodeArena::Posted, 2);
    arena->waitOne(peer, NodeArena::Posted, 2, Deadline::after(kTimeout));
    std::vector<uint32_t> mine2(size_t(10 + ctx.rank), 0);
    arena->readPart(peer, 1, ctx.rank, mine2.data(), mine2.size() * sizeof(uint32_t));
    HIER_CHECK(mine2.front() == uint32_t(100 * peer + ctx.rank) && mine2.back() == mine2.front(), "part " << mine2[0]);
    HIER_CHECK(refusedAsMismatch([&] { arena->readPart(peer, 1, ctx.rank, mine2.data(), 4); }),
               "a part read at another size than published was not refused");
    // And written: this rank overwrites the part it read with its own values; a size other than the
    // published one is refused.
    const std::vector<uint32_t> reply(mine2.size(), uint32_t(5000 + ctx.rank));
    arena->writePart(peer, 1, ctx.rank, reply.data(), reply.size() * sizeof(uint32_t));
    HIER_CHECK(refusedAsMismatch([&] { arena->writePart(peer, 1, ctx.rank, reply.data(), 4); }),
               "a part written at another size than published was not refused");
    // More parts than the slot's table holds (16 bytes each in 4 KiB) are refused, naming the setting.
    HIER_CHECK((arena->requirePartTable(256), true), "256 parts fit 4 KiB");
    bool refused = false;
    try {
      arena->publishParts(1, std::vector<Buffer>(257));
      refused = false;
    } catch (const Error& error) {
      refused = error.kind() == ErrorKind::InvalidUsage &&
                std::string(error.what()).find("HIER_SHM_SLOT_BYTES") != std::string::npos;
    }
    HIER_CHECK(refused, "a table larger than the slot was not refused");
    arena->post(NodeArena::Released, 2);
    arena->waitAll(NodeArena::Released, 2, Deadline::after(kTimeout));
    // By now the rank below wrote its values over the part it read from this rank.
    const int below = (ctx.rank + ctx.size - 1) % ctx.size;
    const auto& written = parts[size_t(below)];
    HIER_CHECK(written.front() == uint32_t(5000 + below) && written.back() == written.front(),
               "part " << below << " after the write: " << written.front());
  });
  EXPECT_EQ(failures, "");
}

// An arena takes what an earlier one found out about the host (a parent group's) only when every rank
// brings the same: then all skip the probe and the timing, and otherwise all find it out again. The
// facts given here are made up (cross-memory attach "unavailable", 7 CPUs) so that taking them shows.
TEST(SharedMemory, AnArenaTakesTheHostsFactsOnlyWhenEveryRankBringsTheSame) {
  auto failures = runRanks(3, [](const RankContext& ctx) {
    const HostFacts madeUp{/*crossMemoryAttach=*/false, /*singleCopyFast=*/true, /*usableCpus=*/7};
    auto alike = NodeArena::create(*ctx.bootstrap->withPrefix("alike/"), ctx.rank, ctx.size, 4096,
                                   Deadline::after(kTimeout), {}, {}, madeUp);
    HIER_CHECK(alike != nullptr, "no arena");
    HIER_CHECK(alike->facts() == madeUp, "the facts every rank brought were not taken");
    HIER_CHECK(!alike->coreForEachRank(), "a core for each rank without cross-memory attach");
    HIER_CHECK(!ctx.bootstrap->check({"alike/hier/shm/cma/" + std::to_string(ctx.rank)}), "probed though all knew");
    // Rank 2 knows nothing: every rank finds the facts out, and all find the same.
    std::optional<HostFacts> known;
    if (ctx.rank != 2) known = madeUp;
    auto mixed = NodeArena::create(*ctx.bootstrap->withPrefix("mixed/"), ctx.rank, ctx.size, 4096,
                                   Deadline::after(kTimeout), {}, {}, known);
    HIER_CHECK(mixed != nullptr, "no arena");
    HIER_CHECK(ctx.bootstrap->check({"mixed/hier/shm/cma/" + std::to_string(ctx.rank)}), "did not probe");
    const HostFacts found = mixed->facts();
    const std::vector<uint8_t> mine{uint8_t(found.crossMemoryAttach), uint8_t(found.singleCopyFast),
                                    uint8_t(found.usableCpus)};
    ctx.bootstrap->set("found/" + std::to_string(ctx.rank), mine);
    for (int r = 0; r < ctx.size; ++r) {
      HIER_CHECK(ctx.bootstrap->get("found/" + std::to_string(r), kTimeout) == mine,
                 "rank " << r << " found otherwise");
    }
  });
  EXPECT_EQ(failures, "");
}

}  // namespace
}  // namespace hier::transport
