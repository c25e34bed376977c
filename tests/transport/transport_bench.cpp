// A microbenchmark of the transport alone (no torch, no Python): point-to-point latency, what the
// agreement before each CPU collective costs, and the allreduce, reduce and allgather times per size, on
// N forked ranks, with the algorithm the rule chose (HIER_ALGORITHMS forces one). For tuning, and to tell
// the transport's own time from what torch and Python add around it; the user-facing benchmark is
// torch_hier.bench.
//   transport_bench [ranks=2] [max_bytes=64M]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tests/transport/multiprocess.h"
#include "transport/agreement/agreement.h"
#include "transport/base/settings.h"
#include "transport/base/tag.h"
#include "transport/group/collective.h"
#include "transport/group/group.h"
#include "transport/select/algorithm_table.h"
#include "transport/select/dispatch.h"

using namespace hier::transport;
using hier::testing::RankContext;

int main(int argc, char** argv) {
  int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  size_t maxBytes = argc > 2 ? parseBytes(argv[2], "max_bytes") : size_t(64) << 20;
  auto failures = hier::testing::runRanks(
      ranks,
      [&](const RankContext& ctx) {
        Group comm(ctx.bootstrap, ctx.rank, ctx.size, 1, "bench");
        uint64_t seq = 0;
        auto now = [] { return std::chrono::steady_clock::now(); };
        auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
        // Ping-pong between ranks 0 and 1.
        if (ctx.rank < 2 && ctx.size >= 2) {
          std::vector<char> buf(size_t(16) << 20);
          for (size_t bytes : {size_t(8), size_t(4096), size_t(65536), size_t(1) << 20, size_t(16) << 20}) {
            int n = bytes >= 65536 ? 200 : 2000;
            auto start = now();
            for (int i = -20; i < n; ++i) {
              if (i == 0) start = now();
              Collective c(comm, seq++, std::chrono::milliseconds(10000));
              if (ctx.rank == 0) {
                c.wait(c.send(1, buf.data(), bytes));
                c.wait(c.receive(1, buf.data(), bytes));
              } else {
                c.wait(c.receive(0, buf.data(), bytes));
                c.wait(c.send(0, buf.data(), bytes));
              }
            }
            double t = seconds(now() - start) / n / 2;
            if (ctx.rank == 0) std::printf("pingpong %8zu B  %9.2f us  %6.2f GB/s\n", bytes, t * 1e6, bytes / t / 1e9);
          }
        }
        seq = 1u << 20;  // the same on every rank, whether it took part in the ping-pong or not
        {
          Collective c(comm, seq++, std::chrono::milliseconds(10000));
          barrier(c);
        }
        {
          // What the agreement every CPU collective starts with costs (transport/agreement.h), beside the
          // smallest allreduce: the same number of rounds, a record of under 1 KiB instead of 4 bytes.
          CallSignature mine("allreduce", "float32", 1 << 20);
          mine.setReduceOp("SUM");
          const int n = 2000;
          auto start = now();
          for (int i = -20; i < n; ++i) {
            if (i == 0) start = now();
            Collective c(comm, seq++, std::chrono::milliseconds(10000));
            if (!agree(c, &mine).agreed()) std::abort();
          }
          double t = seconds(now() - start) / n;
          if (ctx.rank == 0) std::printf("agreement  %9.2f us per collective\n", t * 1e6);
        }
        // Seconds per call of `run(collective)` at `bytes`, after a few calls not timed.
        auto timed = [&](size_t bytes, auto run) {
          int n = int(std::max<size_t>(5, std::min<size_t>(2000, (size_t(200) << 20) / bytes)));
          auto start = now();
          for (int i = -3; i < n; ++i) {
            if (i == 0) start = now();
            Collective c(comm, seq++, std::chrono::milliseconds(60000));
            run(c);
          }
          return seconds(now() - start) / n;
        };
        auto report = [&](const char* op, size_t bytes, double t, double busbw) {
          if (ctx.rank == 0) {
            std::printf("%-9s %9zu B  %9.2f us  busbw %6.2f GB/s  (%s)\n", op, bytes, t * 1e6, busbw / 1e9,
                        std::string(lastChosenAlgorithm).c_str());
          }
        };
        for (size_t bytes = 8; bytes <= maxBytes; bytes *= 4) {
          std::vector<float> data(bytes / 4, 1.0f);
          Buffer b{data.data(), data.size(), DataType::Float32, MemoryType::Host};
          double t = timed(bytes, [&](Collective& c) { allreduce(c, b, ReduceOp::Sum); });
          report("allreduce", bytes, t, bytes / t * 2 * (ctx.size - 1) / ctx.size);
        }
        for (size_t bytes = size_t(64) << 10; bytes <= maxBytes; bytes *= 4) {
          std::vector<float> data(bytes / 4, 1.0f), out(bytes / 4);
          Buffer in{data.data(), data.size(), DataType::Float32, MemoryType::Host};
          Buffer to{out.data(), out.size(), DataType::Float32, MemoryType::Host};
          double t = timed(bytes, [&](Collective& c) { reduce(c, in, to, ReduceOp::Sum, 0); });
          report("reduce", bytes, t, bytes / t);
        }
        for (size_t bytes = size_t(64) << 10; bytes <= maxBytes; bytes *= 4) {
          // bytes: the whole output, as nccl-tests and torch_hier.bench size an allgather.
          const size_t part = bytes / 4 / size_t(ctx.size);
          std::vector<float> data(part, 1.0f), out(part * size_t(ctx.size));
          Buffer in{data.data(), part, DataType::Float32, MemoryType::Host};
          std::vector<Buffer> outs;
          for (int r = 0; r < ctx.size; ++r) {
            outs.push_back({out.data() + size_t(r) * part, part, DataType::Float32, MemoryType::Host});
          }
          double t = timed(bytes, [&](Collective& c) { allgather(c, in, outs); });
          report("allgather", bytes, t, bytes / t * (ctx.size - 1) / ctx.size);
        }
      },
      std::chrono::seconds(600));
  if (!failures.empty()) std::fprintf(stderr, "%s", failures.c_str());
  return failures.empty() ? 0 : 1;
}
