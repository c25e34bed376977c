// hier through torch's ProcessGroup API from C++, no Python: the layer between the transport alone
// (tests/transport/transport_bench.cpp) and torch_hier.bench, which calls the same API from Python. For
// telling apart what hier costs from what Python's dispatch adds around it; not a test.
//
//   process_group_bench [ranks=2] [max_bytes=4M] [op ...]
//
// Forks the ranks (before any of torch runs), which meet through a TCPStore on a free local port. Every
// operation blocks (asyncOp false, then wait(), as torch.distributed's calls without async_op do), on
// the buffers torch_hier.bench sizes (the whole buffer; all-to-all and the gathers split it evenly), 1 KiB
// and every 4x up to max_bytes, the operations named (all of them when none is; the asynchronous
// allreduces below are the exception to the blocking above). Rank 0 prints the time
// per call, averaged over ranks, and the algorithm's bandwidth. Results are not checked here: the tests
// do that.
#include <ATen/ATen.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "plugin/groups.hpp"

namespace {

const char* const kOps[] = {"allreduce",      "allreduce_async", "allreduce_async8", "allgather",
                            "reduce_scatter", "alltoall",        "broadcast",        "reduce",
                            "gather",         "scatter",         "sendrecv",         "barrier"};
// allreduce_async: asyncOp true, then wait() at once; allreduce_async8: eight in flight, then a wait() for
// each (DDP's buckets), timed per operation.

// "64M", "4K", "1048576": bytes.
int64_t parseBytes(const std::string& text) {
  const char unit = text.empty() ? '\0' : text.back();
  const int shift = unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
  return std::atoll(text.c_str()) << shift;
}

// Options for a call that blocks, as torch.distributed's calls without async_op do.
template <typename Options>
Options blocking() {
  Options options;
  options.asyncOp = false;
  return options;
}

uint16_t freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::perror("process_group_bench: finding a free port");
    std::exit(1);
  }
  close(fd);
  return ntohs(address.sin_port);
}

void runRank(int rank, int size, uint16_t port, int64_t maxBytes, const std::vector<std::string>& ops) {
  c10d::TCPStoreOptions storeOptions;
  storeOptions.port = port;
  storeOptions.isServer = rank == 0;
  storeOptions.numWorkers = size;
  storeOptions.timeout = std::chrono::seconds(60);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", storeOptions);
  hier::createGroup(store, rank, size, "bench");
  auto group = hier::resolveGroup("bench");

  const auto fence = blocking<c10d::BarrierOptions>();
  // Seconds per call of `run`, averaged over the ranks.
  auto timed = [&](int64_t bytes, const std::function<void()>& run) {
    // About 0.3 s of work a point at 1 GB/s, between 10 and 20000 calls: ten times what torch_hier.bench
    // takes, since a call costs less here and a short run is one scheduling hiccup away from noise.
    const int64_t calls = int64_t(3e8) / std::max<int64_t>(bytes, 1);
    const int iterations = int(std::clamp<int64_t>(calls, 10, 20000));
    for (int i = 0; i < std::max(3, iterations / 10); ++i) run();
    group->barrier(fence)->wait();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) run();
    group->barrier(fence)->wait();
    std::vector<at::Tensor> seconds{
        at::full({1}, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations,
                 at::kDouble)};
    const auto sum = blocking<c10d::AllreduceOptions>();
    group->allreduce(seconds, sum)->wait();
    return seconds[0].item<double>() / size;
  };
  auto wanted = [&](const char* op) { return ops.empty() || std::find(ops.begin(), ops.end(), op) != ops.end(); };
  auto report = [&](const char* op, int64_t bytes, const std::function<void()>& run, int perRun = 1) {
    if (!wanted(op)) return;
    const double seconds = timed(bytes * perRun, run) / perRun;
    if (rank != 0) return;
    std::printf("%-15s %9lld B %10.1f us %8.2f GB/s\n", op, (long long)bytes, seconds * 1e6, bytes / seconds / 1e9);
  };

  // _allgather_base and _reduce_scatter_base: the names every torch from 2.11 on has (later ones deprecate
  // them for all_gather_single and reduce_scatter_single, which 2.11 lacks).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  for (int64_t bytes = 1024; bytes <= maxBytes; bytes *= 4) {
    const int64_t count = std::max<int64_t>(size, bytes / 4 / size * size);
    at::Tensor whole = at::ones({count}), part = at::ones({count / size}), other = at::empty({count});
    const auto allreduceOptions = blocking<c10d::AllreduceOptions>();
    std::vector<at::Tensor> data{whole};
    report("allreduce", bytes, [&] { group->allreduce(data, allreduceOptions)->wait(); });
    c10d::AllreduceOptions asyncOptions;
    asyncOptions.asyncOp = true;
    report("allreduce_async", bytes, [&] { group->allreduce(data, asyncOptions)->wait(); });
    // Eight more buffers of this size: only when timed (at 64 MiB they would take half a GiB a rank).
    std::vector<std::vector<at::Tensor>> buckets;
    if (wanted("allreduce_async8")) {
      for (int i = 0; i < 8; ++i) buckets.push_back({at::ones({count})});
    }
    report(
        "allreduce_async8", bytes,
        [&] {
          std::vector<c10::intrusive_ptr<c10d::Work>> works;
          for (auto& bucket : buckets) works.push_back(group->allreduce(bucket, asyncOptions));
          for (auto& work : works) work->wait();
        },
        8);
    const auto allgatherOptions = blocking<c10d::AllgatherOptions>();
    report("allgather", bytes, [&] { group->_allgather_base(other, part, allgatherOptions)->wait(); });
    const auto reduceScatterOptions = blocking<c10d::ReduceScatterOptions>();
    report("reduce_scatter", bytes, [&] { group->_reduce_scatter_base(part, whole, reduceScatterOptions)->wait(); });
    const auto alltoallOptions = blocking<c10d::AllToAllOptions>();
    std::vector<int64_t> even;
    report("alltoall", bytes, [&] { group->alltoall_base(other, whole, even, even, alltoallOptions)->wait(); });
    const auto broadcastOptions = blocking<c10d::BroadcastOptions>();
    report("broadcast", bytes, [&] { group->broadcast(data, broadcastOptions)->wait(); });
    const auto reduceOptions = blocking<c10d::ReduceOptions>();
    report("reduce", bytes, [&] { group->reduce(data, reduceOptions)->wait(); });
    // Gather and scatter as torch_hier.bench sizes them: every rank's part to or from rank 0's list.
    std::vector<at::Tensor> parts{part};
    std::vector<std::vector<at::Tensor>> rootParts;
    if (rank == 0) rootParts.push_back(at::ones({count}).chunk(size));
    const auto gatherOptions = blocking<c10d::GatherOptions>();
    report("gather", bytes, [&] { group->gather(rootParts, parts, gatherOptions)->wait(); });
    const auto scatterOptions = blocking<c10d::ScatterOptions>();
    report("scatter", bytes, [&] { group->scatter(parts, rootParts, scatterOptions)->wait(); });
    // Ranks pair up (0-1, 2-3, ...) and exchange their whole buffers, as torch_hier.bench's sendrecv does;
    // an odd rank out sits it out.
    std::vector<at::Tensor> outgoing{whole}, incoming{other};
    report("sendrecv", bytes, [&] {
      if ((rank ^ 1) >= size) return;
      auto sent = group->send(outgoing, rank ^ 1, 0);
      auto received = group->recv(incoming, rank ^ 1, 0);
      sent->wait();
      received->wait();
    });
  }
#pragma GCC diagnostic pop
  report("barrier", 0, [&] { group->barrier(fence)->wait(); });
  hier::destroyGroup("bench");
}

}  // namespace

int main(int argc, char** argv) {
  const int size = argc > 1 ? std::atoi(argv[1]) : 2;
  const int64_t maxBytes = argc > 2 ? parseBytes(argv[2]) : int64_t(4) << 20;
  const std::vector<std::string> ops(argv + std::min(argc, 3), argv + argc);
  const bool known = std::all_of(ops.begin(), ops.end(), [](const std::string& op) {
    return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
  });
  if (size < 1 || maxBytes < 1024 || !known) {
    std::fprintf(stderr, "usage: process_group_bench [ranks=2] [max_bytes=4M] [op ...]; ops:");
    for (const char* op : kOps) std::fprintf(stderr, " %s", op);
    std::fprintf(stderr, "\n");
    return 2;
  }
  const uint16_t port = freePort();
  std::vector<pid_t> children;
  for (int rank = 1; rank < size; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        runRank(rank, size, port, maxBytes, ops);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
        _exit(1);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  int failed = 0;
  try {
    runRank(0, size, port, maxBytes, ops);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank 0: %s\n", error.what());
    failed = 1;
  }
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}
