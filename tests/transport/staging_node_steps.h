// A NodeSteps for the tests that stages as the device does. The node's collectives are the host's
// (HostNodeSteps), but the network steps work in slots of their own: fragment f's pieces are copied into
// and out of slot f % 2, and a node of several ranks scales contributions inside its reductions
// (PREMUL_SUM's way), as NCCL does. So the CPU tests run every line the device path runs through the shared schedules
// (slot offsets, the order of the copies, the reduction stages that scale in the node step), and check the pipeline's
// promise: a network step finds its slot holding its own fragment, never a later one. The real device steps
// (transport/nccl/device_node_steps.cpp) need a GPU; tests/gpu runs them.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
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
  explicit StagingNodeSteps(transport::Collective& c, bool direct = false)
      : host_(c), deadline_(c.deadline()), direct_(direct) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  // As NCCL before 2.29.7 (torch 2.11 ships 2.28.9): floating point, and not on a node of one rank. In
  // layouts with such a node (2 + 1) no node may scale, or the stages of the nodes disagree.
  bool scalesContributions(DataType dtype, int nodeRanks) const override {
    return (dtype == DataType::Float32 || dtype == DataType::Float64) && nodeRanks > 1;
  }

  void reduceScatter(const std::vector<Buffer>& inputs, const Buffer& output, const Reduction& how) override {
    if (!how.scale) return host_.reduceScatter(inputs, output, how);
    std::vector<std::vector<char>> copies;
    std::vector<Buffer> scaled;
    for (const auto& input : inputs) scaled.push_back(scaledCopy(input, *how.scale, copies));
    host_.reduceScatter(scaled, output, Reduction{});
  }
  void allgather(const std::vector<Buffer>& parts) override { host_.allgather(parts); }
  void reduce(const Buffer& input, const Buffer& output, const Reduction& how, int root) override {
    if (!how.scale) return host_.reduce(input, output, how, root);
    std::vector<std::vector<char>> copies;
    host_.reduce(scaledCopy(input, *how.scale, copies), output, Reduction{}, root);
  }
  void broadcast(const Buffer& data, int root) override { host_.broadcast(data, root); }

  Buffer scratch(size_t count, DataType dtype) override { return host_.scratch(count, dtype); }

  void reserveSlots(size_t slotBytes) override {
    slotBytes_ = std::max<size_t>(slotBytes, 1);
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
    if (host.data != piece.data) std::memcpy(host.data, piece.data, piece.bytes());
  }
  void copyIn(const Buffer& host, const Buffer& piece) override {
    if (host.data != piece.data) std::memcpy(piece.data, host.data, piece.bytes());
  }
  void staged(size_t f) override {
    std::lock_guard<std::mutex> lock(mutex_);
    inSlot_[f % 2] = long(f);
    changed_.notify_all();
  }
  void awaitStaged(size_t f) override {
    // A random pause first: a network thread that lags gives a wrong pipeline the chance to refill
    // the slot under it.
    std::this_thread::sleep_for(std::chrono::microseconds(random_() % 2000));
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

  transport::hierarchy::HostNodeSteps host_;
  const transport::Deadline deadline_;
  const bool direct_;
  std::vector<char> slots_;
  size_t slotBytes_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::array<long, 2> inSlot_{-1, -1};
  std::minstd_rand random_{std::random_device{}()};
};

}  // namespace hier::testing
