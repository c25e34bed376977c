// The node steps of a hierarchical schedule on device memory (hierarchy/node_steps.h): NCCL over the
// ranks of this rank's node, enqueued on one CUDA stream, and the staging of each fragment through two
// pinned host slots, filled and emptied by copies on that stream. An event per fragment tells the
// network step that the fragment's copies out have landed.
//
// The schedule runs in one pass (Pass::Whole: the network steps wait for the device and the node steps
// for the network, on the host), or in two (setPass): Pass::Enqueue on the caller's thread enqueues every
// node step, each fragment's spread behind a stream gate (stream_gate.h); Pass::Network, on the group's
// executor, runs the network steps and opens the gates. Both passes get the same slots and scratch.
//
// The network steps move the host copies, except, with `direct` (ucx/cuda_direct.h: a UCX that takes
// CUDA memory, over a network that reaches it), those that only move bytes: they take the device pieces
// themselves (networkView), once the stream has reached them (awaitStaged).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <vector>

#include "transport/base/deadline.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/nccl/nccl_communicator.h"
#include "transport/nccl/stream_gate.h"

namespace hier::transport::nccl {

class DeviceNodeSteps final : public hierarchy::NodeSteps {
 public:
  // Memory that stays valid until `stream` has passed the schedule's end: the caller allocates it (pinned
  // host memory for MemoryType::Host, device memory on `node`'s device otherwise) and holds it that long.
  using Allocate = std::function<void*(size_t bytes, MemoryType memory)>;

  // `node`: NCCL over the ranks of this rank's node, in node order. The steps are enqueued on `stream`;
  // the schedule returns once the last one is: the caller treats `stream` as after any NCCL call.
  DeviceNodeSteps(Communicator& node, cudaStream_t stream, Allocate allocate, const Deadline& deadline,
                  bool direct = false);
  ~DeviceNodeSteps() override;
  DeviceNodeSteps(const DeviceNodeSteps&) = delete;
  DeviceNodeSteps& operator=(const DeviceNodeSteps&) = delete;

  // Pass::Enqueue or Pass::Network: the schedule runs twice (the header comment); Whole by default.
  void setPass(Pass pass) { pass_ = pass; }
  Pass pass() const override { return pass_; }
  void gate(size_t fragment) override;
  void open(size_t fragment) override;
  void openAll() override;

  int rank() const override { return node_.rank(); }
  int size() const override { return node_.size(); }
  bool scalesContributions(DataType dtype, int nodeRanks) const override {
    return scalesOn(dtype, nodeRanks, versionCode());
  }

  // Equal, consecutive parts take NCCL's own reduce-scatter and all-gather; any others one NCCL group of
  // rooted reduces or broadcasts, a part each.
  void reduceScatter(const std::vector<Buffer>& inputs, const Buffer& output, const Reduction& how) override;
  void allgather(const std::vector<Buffer>& parts) override;
  void reduce(const Buffer& input, const Buffer& output, const Reduction& how, int root) override;
  void broadcast(const Buffer& data, int root) override;
  void together(const std::function<void()>& steps) override { node_.grouped(steps, deadline_); }

  Buffer scratch(size_t count, DataType dtype) override;

  void reserveSlots(size_t slotBytes) override;
  Buffer hostView(size_t fragment, const Buffer& piece, size_t offset) override;
  Buffer networkView(size_t fragment, const Buffer& piece, size_t offset) override;
  // Between a piece and its view: device to host, or within the device where the view is a piece too.
  void copyOut(const Buffer& piece, const Buffer& host) override;
  void copyIn(const Buffer& host, const Buffer& piece) override;
  void staged(size_t fragment) override;
  void awaitStaged(size_t fragment) override;

 private:
  Communicator& node_;
  const cudaStream_t stream_;
  const Allocate allocate_;
  const Deadline deadline_;
  const bool direct_;
  Pass pass_ = Pass::Whole;
  char* slots_ = nullptr;  // two slots of slotBytes_, pinned
  size_t slotBytes_ = 0;
  Buffer scratch_{};
  // By fragment: its copies out landed. One each: in two passes fragment f + 2 may be staged (its event
  // recorded) before fragment f's network step asks.
  std::vector<cudaEvent_t> copiedOut_;
  std::unique_ptr<StreamGate> gate_;  // made by the first gate(), in pinned memory from allocate_
};

}  // namespace hier::transport::nccl
