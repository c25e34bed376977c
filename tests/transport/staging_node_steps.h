// A NodeSteps for the tests that stages as the device does. The node's collectives are the host's
// (HostNodeSteps), but the network steps work in slots of their own: fragment f's pieces are copied into
// and out of slot f % 2, and a node of several ranks scales contributions inside its reductions
// (PREMUL_SUM's way), as NCCL does. So the CPU tests run every line the device path runs through the
// shared schedules (slot offsets, the order of the copies, the reduction stages that scale in the node
// step), and check the pipeline's promise: a network step finds its slot holding its own fragment, never
// a later one. The real device steps (transport/nccl/device_node_steps.cpp) need a GPU; tests/gpu runs
// them.
//
// `deferred` runs a schedule as the device path does where the caller's thread only enqueues
// (node_steps.h, passes): in the Enqueue pass every node step goes to a stream of its own, a thread that
// runs them in order, with random pauses, and holds at each gate until the Network pass opens it; the
// Network pass runs the network steps on the calling thread and may run no node step.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "transport/base/error.h"
#include "transport/hierarchy/host_node_steps.h"
#include "transport/reduce/reduce.h"

namespace hier::testing {

class StagingNodeSteps final : public transport::hierarchy::NodeSteps {
 public:
  using Buffer = transport::Buffer;
  using DataType = transport::DataType;
  using Reduction = transport::Reduction;

  // `direct`: the network steps that only move bytes take the pieces themselves (networkView), as where
  // UCX takes device memory (transport/ucx/cuda_direct.h); the others still go through the slots.
  explicit StagingNodeSteps(transport::Collective& c, bool direct = false, bool deferred = false)
      : host_(c), deadline_(c.deadline()), direct_(direct), deferred_(deferred) {
    if (deferred_) stream_ = std::thread([this] { runStream(); });
  }
  ~StagingNodeSteps() override {
    if (!deferred_) return;
    openAll();  // a test that failed part-way must not leave the stream at a gate
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    stream_.join();
  }

  // Runs `schedule(collective)` (a schedule body with this object as its node steps) as the device path
  // does: whole on `c`, or, deferred, in its two passes, then waits until the stream ran every node
  // step. The enqueue pass gets a planning collective, as on the device: it may move nothing.
  template <typename Schedule>
  void run(transport::Collective& c, const Schedule& schedule) {
    if (!deferred_) return schedule(c);
    transport::Collective plan = transport::Collective::planning(c.group(), c.deadline());
    pass_ = Pass::Enqueue;
    schedule(plan);
    pass_ = Pass::Network;
    schedule(c);
    drain();
  }

  Pass pass() const override { return pass_; }
  void gate(size_t f) override {
    enqueue([this, f] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!changed_.wait_until(lock, deadline_.when, [&] { return opened_ > f; })) {
        throw transport::Error(transport::ErrorKind::Timeout, "fragment " + std::to_string(f) + "'s gate never opened");
      }
    });
  }
  void open(size_t f) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      opened_ = std::max(opened_, f + 1);
    }
    changed_.notify_all();
  }
  void openAll() override { open(std::numeric_limits<size_t>::max() - 1); }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  // As NCCL before 2.29.7 (torch 2.11 ships 2.28.9): floating point, and not on a node of one rank. In
  // layouts with such a node (2 + 1) no node may scale, or the stages of the nodes disagree.
  bool scalesContributions(DataType dtype, int nodeRanks) const override {
    return (dtype == DataType::Float32 || dtype == DataType::Float64) && nodeRanks > 1;
  }

  void reduceScatter(const std::vector<Buffer>& inputs, const Buffer& output, const Reduction& how) override {
    enqueue([this, inputs, output, how] {
      if (!how.scale) return host_.reduceScatter(inputs, output, how);
      std::vector<std::vector<char>> copies;
      std::vector<Buffer> scaled;
      for (const auto& input : inputs) scaled.push_back(scaledCopy(input, *how.scale, copies));
      host_.reduceScatter(scaled, output, Reduction{});
    });
  }
  void allgather(const std::vector<Buffer>& parts) override {
    enqueue([this, parts] { host_.allgather(parts); });
  }
  void reduce(const Buffer& input, const Buffer& output, const Reduction& how, int root) override {
    enqueue([this, input, output, how, root] {
      if (!how.scale) return host_.reduce(input, output, how, root);
      std::vector<std::vector<char>> copies;
      host_.reduce(scaledCopy(input, *how.scale, copies), output, Reduction{}, root);
    });
  }
  void broadcast(const Buffer& data, int root) override {
    enqueue([this, data, root] { host_.broadcast(data, root); });
  }

  // Both passes get the same scratch and slots.
  Buffer scratch(size_t count, DataType dtype) override {
    if (!scratch_.data) scratch_ = host_.scratch(count, dtype);
    if (scratch_.count != count || scratch_.dtype != dtype) {
      throw transport::Error(transport::ErrorKind::Internal, "the passes asked for different scratch");
    }
    return scratch_;
  }

  void reserveSlots(size_t slotBytes) override {
    slotBytes = std::max<size_t>(slotBytes, 1);
    if (slotBytes_ == slotBytes) return;
    if (slotBytes_ != 0) throw transport::Error(transport::ErrorKind::Internal, "the passes reserved different slots");
    slotBytes_ = slotBytes;
    slots_.assign(2 * slotBytes_, char(0x5a));
  }
  Buffer hostView(size_t f, const Buffer& piece, size_t offset) override {
    if (offset + piece.bytes() > slotBytes_) {
      throw transport::Error(transport::ErrorKind::Internal, "a piece overruns its slot");
    }
    return Buffer{slots_.data() + (f % 2) * slotBytes_ + offset, piece.count, piece.dtype, transport::MemoryType::Host};
  }
  Buffer networkView(size_t f, const Buffer& piece, size_t offset) override {
    return direct_ ? piece : hostView(f, piece, offset);
  }
  void copyOut(const Buffer& piece, const Buffer& host) override {
    enqueue([piece, host] {
      if (host.data != piece.data) std::memcpy(host.data, piece.data, piece.bytes());
    });
  }
  void copyIn(const Buffer& host, const Buffer& piece) override {
    enqueue([piece, host] {
      if (host.data != piece.data) std::memcpy(piece.data, host.data, piece.bytes());
    });
  }
  void staged(size_t f) override {
    enqueue([this, f] {
      std::lock_guard<std::mutex> lock(mutex_);
      inSlot_[f % 2] = long(f);
      changed_.notify_all();
    });
  }
  void awaitStaged(size_t f) override {
    // A random pause first: a network thread that lags gives a wrong pipeline the chance to refill
    // the slot under it.
    std::this_thread::sleep_for(std::chrono::microseconds(randomMicroseconds(2000)));
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_until(lock, deadline_.when, [&] { return inSlot_[f % 2] >= long(f); })) {
      throw transport::Error(transport::ErrorKind::Timeout, "fragment was never staged");
    }
    if (inSlot_[f % 2] != long(f)) {
      throw transport::Error(transport::ErrorKind::Internal,
                             "fragment " + std::to_string(f) + "'s slot was refilled by fragment " +
                                 std::to_string(inSlot_[f % 2]) + " before its network step");
    }
  }

 private:
  static Buffer scaledCopy(const Buffer& input, double factor, std::vector<std::vector<char>>& copies) {
    copies.emplace_back(std::max<size_t>(input.bytes(), 1));
    transport::scale(copies.back().data(), input.data, input.count, input.dtype, factor);
    return Buffer{copies.back().data(), input.count, input.dtype, transport::MemoryType::Host};
  }

  // A node step: run now (Whole), or onto the stream (Enqueue). The Network pass runs none.
  void enqueue(std::function<void()> step) {
    if (pass_ == Pass::Whole) return step();
    if (pass_ == Pass::Network) {
      throw transport::Error(transport::ErrorKind::Internal, "a node step was called in the network pass");
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      steps_.push_back(std::move(step));
    }
    changed_.notify_all();
  }
  // The stream: the node steps in order, each after a random pause, until one throws (the rest are
  // skipped, as a failed device leaves them) or the object goes.
  void runStream() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return !steps_.empty() || stopping_; });
      if (steps_.empty()) return;
      auto step = std::move(steps_.front());
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(randomMicroseconds(300)));
      std::exception_ptr failed;
      try {
        if (!streamError_) step();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && !streamError_) streamError_ = failed;
      steps_.pop_front();
      changed_.notify_all();
    }
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_until(lock, deadline_.when, [&] { return steps_.empty(); })) {
      throw transport::Error(transport::ErrorKind::Timeout, "the stream did not finish its node steps");
    }
    if (streamError_) std::rethrow_exception(streamError_);
  }
  unsigned randomMicroseconds(unsigned below) {
    std::lock_guard<std::mutex> lock(randomMutex_);
    return unsigned(random_() % below);
  }

  transport::hierarchy::HostNodeSteps host_;
  const transport::Deadline deadline_;
  const bool direct_;
  const bool deferred_;
  Pass pass_ = Pass::Whole;
  std::vector<char> slots_;
  size_t slotBytes_ = 0;
  Buffer scratch_{};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::array<long, 2> inSlot_{-1, -1};
  size_t opened_ = 0;  // gates below this are open
  std::deque<std::function<void()>> steps_;
  std::exception_ptr streamError_;
  bool stopping_ = false;
  std::thread stream_;
  std::mutex randomMutex_;
  std::minstd_rand random_{std::random_device{}()};
};

}  // namespace hier::testing
