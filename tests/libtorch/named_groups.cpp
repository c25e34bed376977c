// A LibTorch program, no Python: hier groups made, used and destroyed by name (plugin/groups.hpp).
//
//   named_groups processes <rank> <size> <store port>   one rank per process, meeting through a TCPStore
//   named_groups threads <size>                         every rank a thread of this process
//
// Each rank creates two groups, "everyone" and "evens" (the even ranks, in reverse order), runs
// torch's functional collectives on them by name through the dispatcher (as DTensor and compiled code
// do), runs the ProcessGroup API on the group resolveGroup returns, checks every result against what
// it computes locally, destroys the groups and checks the names are gone. On torch 2.15 it also checks
// the keyed completion hooks (a C++-only API): each success heard of once, by its Work's key. It prints one line per
// rank, "rank R: ok (...)", and exits non-zero on the first mismatch. tests/python/test_libtorch.py runs it.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plugin/groups.hpp"
#include "registry/torch_version.hpp"

namespace {

std::mutex outputMutex;

void say(const std::string& line) {
  std::lock_guard<std::mutex> lock(outputMutex);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// A functional op called boxed, as torch.compile's generated code and DTensor call it: the group is
// named by a string and the result is a tensor to wait for.
at::Tensor callFunctional(const char* op, std::vector<c10::IValue> arguments) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow((std::string("_c10d_functional::") + op).c_str(), "");
  torch::jit::Stack stack(std::move(arguments));
  handle.callBoxed(&stack);
  return stack.back().toTensor();
}

at::Tensor waitTensor(const at::Tensor& t) { return callFunctional("wait_tensor", {t}); }

void expectEqual(const at::Tensor& got, const at::Tensor& want, const std::string& what, int rank) {
  TORCH_CHECK(got.sizes() == want.sizes() && at::equal(got, want), "rank ", rank, ": ", what, " is wrong: got ", got,
              "expected ", want);
}

// Rank r contributes (r + 1) * [1, 2, ..., n].
at::Tensor contribution(int rank, int64_t n) { return at::arange(1, n + 1, at::kLong) * (rank + 1); }

#if HIER_TORCH_HAS_COMPLETION_HOOKS
// torch 2.15's keyed completion hooks on `group`: a registered hook hears of every operation that succeeded,
// once, by the key its Work carries, with a duration; an unregistered one hears of nothing more.
void checkCompletionHooks(const c10::intrusive_ptr<c10d::ProcessGroup>& group, int rank) {
  TORCH_CHECK(group->supportsCompletionHooks(), "rank ", rank, ": a hier group says it has no completion hooks");
  struct Heard {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<uint64_t, int> times;  // key -> how often
    bool timed = true;
  };
  auto heard = std::make_shared<Heard>();  // the hook may outlive this function
  group->registerCompletionHook(7, [heard](const c10d::CompletionHookArgs& args) {
    std::lock_guard<std::mutex> lock(heard->mutex);
    ++heard->times[args.completionKey];
    heard->timed = heard->timed && args.duration_ms.has_value() && *args.duration_ms >= 0;
    heard->changed.notify_all();
  });
  std::vector<at::Tensor> tensors{contribution(rank, 100)};
  std::vector<uint64_t> keys;
  for (int i = 0; i < 3; ++i) {
    auto work = group->allreduce(tensors);
    work->wait();
    keys.push_back(work->getCompletionKey());
  }
  {
    std::unique_lock<std::mutex> lock(heard->mutex);
    const bool all = heard->changed.wait_for(lock, std::chrono::seconds(10), [&] {
      return std::all_of(keys.begin(), keys.end(), [&](uint64_t key) { return heard->times.count(key) > 0; });
    });
    TORCH_CHECK(all, "rank ", rank, ": the completion hook did not hear of every allreduce within 10 s");
    for (uint64_t key : keys)
      TORCH_CHECK(heard->times[key] == 1, "rank ", rank, ": a work's completion was heard twice");
    TORCH_CHECK(heard->timed, "rank ", rank, ": a completion came without a duration");
  }
  TORCH_CHECK(keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2], "rank ", rank, ": two works share a key");
  group->unregisterCompletionHook(7);
  auto after = group->allreduce(tensors);
  after->wait();
  group->barrier()->wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::lock_guard<std::mutex> lock(heard->mutex);
  TORCH_CHECK(!heard->times.count(after->getCompletionKey()), "rank ", rank, ": an unregistered hook still heard");
}
#endif

void runRank(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
  constexpr int64_t n = 1000;
  hier::GroupOptions options;
  options.timeout = std::chrono::seconds(60);
  hier::createGroup(store, rank, size, "everyone", options);

  // all_reduce(sum) by name: the sum of every rank's contribution.
  at::Tensor sum =
      waitTensor(callFunctional("all_reduce", {contribution(rank, n), std::string("sum"), std::string("everyone")}));
  expectEqual(sum, contribution(0, n) * (size * (size + 1) / 2), "all_reduce on 'everyone'", rank);

  // all_gather_into_tensor by name: every contribution, in rank order.
  at::Tensor gathered = waitTensor(
      callFunctional("all_gather_into_tensor", {contribution(rank, n), int64_t(size), std::string("everyone")}));
  std::vector<at::Tensor> parts;
  for (int r = 0; r < size; ++r) parts.push_back(contribution(r, n));
  expectEqual(gathered, at::cat(parts), "all_gather_into_tensor on 'everyone'", rank);

  // A subgroup: the even ranks, listed highest first, so group rank and job rank differ.
  std::vector<int> evens;
  for (int r = size - 1; r >= 0; --r)
    if (r % 2 == 0) evens.push_back(r);
  const bool even = rank % 2 == 0;
  if (even) {
    const int groupRank = int(std::find(evens.begin(), evens.end(), rank) - evens.begin());
    hier::GroupOptions subOptions = options;
    subOptions.globalRanks.assign(evens.begin(), evens.end());
    hier::createGroup(store, groupRank, int(evens.size()), "evens", subOptions);
    // The ProcessGroup API on the group the registry resolves: broadcast from group rank 0 (job rank evens[0]).
    auto group = hier::resolveGroup("evens");
    std::vector<at::Tensor> tensors{contribution(rank, n)};
    group->broadcast(tensors)->wait();
    expectEqual(tensors[0], contribution(evens[0], n), "broadcast on 'evens'", rank);
    at::Tensor max =
        waitTensor(callFunctional("all_reduce", {contribution(rank, n), std::string("max"), std::string("evens")}));
    expectEqual(max, contribution(evens[0], n), "all_reduce(max) on 'evens'", rank);
    hier::destroyGroup("evens");
  }

  // Destroyed names are gone, and say so.
  bool refused = false;
  try {
    hier::resolveGroup("evens");
  } catch (const c10::Error& e) {
    refused = std::string(e.what()).find("evens") != std::string::npos;
  }
  TORCH_CHECK(refused, "rank ", rank, ": resolveGroup(\"evens\") did not fail with a message naming the group");

  std::string hooks;
#if HIER_TORCH_HAS_COMPLETION_HOOKS
  checkCompletionHooks(hier::resolveGroup("everyone"), rank);
  hooks = "; completion hooks";
#endif
  hier::resolveGroup("everyone")->barrier()->wait();
  hier::destroyGroup("everyone");
  say("rank " + std::to_string(rank) + ": ok (all_reduce, all_gather_into_tensor on 'everyone'" +
      (even ? "; broadcast, all_reduce on 'evens'" : "") + hooks + ")");
}

c10::intrusive_ptr<c10d::Store> makeStore(bool server, uint16_t port, int size) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = server;
  options.numWorkers = size;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(60);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

int usage() {
  std::fprintf(stderr, "usage: named_groups processes <rank> <size> <store port> | named_groups threads <size>\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string mode = argv[1];
  try {
    if (mode == "processes" && argc == 5) {
      const int rank = std::atoi(argv[2]), size = std::atoi(argv[3]);
      runRank(makeStore(rank == 0, uint16_t(std::atoi(argv[4])), size), rank, size);
      return 0;
    }
    if (mode == "threads" && argc == 3) {
      const int size = std::atoi(argv[2]);
      hier::setThreadIsolationMode(true);  // each thread sees its own "everyone" and "evens"
      auto server = makeStore(true, 0, size);
      const uint16_t port = static_cast<c10d::TCPStore&>(*server).getPort();
      std::vector<std::exception_ptr> errors(size);
      std::vector<std::thread> ranks;
      for (int rank = 0; rank < size; ++rank)
        ranks.emplace_back([&, rank] {
          try {
            runRank(rank == 0 ? server : makeStore(false, port, size), rank, size);
          } catch (...) {
            errors[rank] = std::current_exception();
          }
        });
      for (auto& t : ranks) t.join();
      for (auto& e : errors)
        if (e) std::rethrow_exception(e);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "named_groups: %s\n", e.what());
    return 1;
  }
  return usage();
}
