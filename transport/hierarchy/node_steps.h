// The node half of every hierarchical schedule, and the staging between it and the network half.
//
// Each hierarchical schedule (select/algorithm_table.cpp lists them) is written once. Its network steps
// run on host memory, over UCX, on the rail or leaders group (flat/flat.h). Its node steps, the
// collectives among the ranks of one host, and the memory they work in are this interface's:
//
//   HostNodeSteps (host_node_steps.h)         host memory; the node group (shared memory, or UCX)
//   nccl::DeviceNodeSteps (nccl/device_...)   device memory; NCCL on a CUDA stream, pinned slots, events
//
// so the CPU tests run the very schedule bodies the GPU path runs. Between the halves, fragment f's
// pieces move through `hostView` / `copyOut` / `staged` (node side) and `awaitStaged` (network side),
// and back through `copyIn`: on host memory the views are the pieces themselves and nothing moves; on
// device memory they are places in pinned slot f % 2, filled and emptied by copies on the stream, except
// a `networkView` where UCX takes device memory: the piece itself, which the network step reads or
// writes once awaitStaged(f) says the stream has reached it.
//
// Threads (pipeline.h): the node steps, copyOut, staged and copyIn run on the schedule's calling thread,
// in fragment order; awaitStaged runs on its network thread. Two slots suffice: the calling thread
// stages fragment f only after fragment f - 2's network step is done and its copy back is issued; on a
// device that copy may still be pending, so every rank whose network step uses a slot calls staged(f)
// (even with nothing to copy out) and its network step awaitStaged(f) before touching the slot.
//
// Passes. On host memory a schedule runs once (Pass::Whole). On a device it runs twice, with the same
// arguments, so that the caller's thread only enqueues: first Pass::Enqueue, where every node step is
// enqueued in fragment order and each fragment's spread waits behind a gate (gate(f): the device waits
// until the host opens it) while no network step runs; then Pass::Network, on the group's executor,
// where the network steps run in fragment order, each opening its fragment's gate (open(f)), and no
// node step runs. A network step that fails opens every gate (openAll), so the device never waits for
// a host that gave up. Both passes take the same slots and scratch: reserveSlots and scratch give the
// second pass what they gave the first.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "transport/base/types.h"

namespace hier::transport::hierarchy {

class NodeSteps {
 public:
  virtual ~NodeSteps() = default;

  enum class Pass { Whole, Enqueue, Network };
  // Which pass the schedule is running (see the header comment).
  virtual Pass pass() const { return Pass::Whole; }
  // Pass::Enqueue: the node steps enqueued from here on wait until fragment f's network step is done.
  virtual void gate(size_t /*fragment*/) {}
  // Pass::Network: fragment f's network step is done; openAll: every gate, whatever came of the steps.
  virtual void open(size_t /*fragment*/) {}
  virtual void openAll() {}

  // This rank's place on its node, and how many ranks the node has.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether a node of `nodeRanks` ranks scales contributions (Reduction::scale) of `dtype` inside its
  // reductions. Asked for every node of the group (reduction_stages.h), so that every rank decides alike.
  virtual bool scalesContributions(DataType dtype, int nodeRanks) const = 0;

  // Collectives among the node's ranks, on buffers in the node's memory; per-rank parts in node order.
  // reduceScatter: `output` on this rank receives the reduction of every node rank's inputs[rank()].
  virtual void reduceScatter(const std::vector<Buffer>& inputs, const Buffer& output, const Reduction& how) = 0;
  // In place: every rank's parts[r] receives rank r's parts[r].
  virtual void allgather(const std::vector<Buffer>& parts) = 0;
  // `output` on `root` receives the reduction of every node rank's `input` (may alias it; ignored elsewhere).
  virtual void reduce(const Buffer& input, const Buffer& output, const Reduction& how, int root) = 0;
  virtual void broadcast(const Buffer& data, int root) = 0;
  // Runs `steps`, several node collectives of one fragment, as one launch where the node can (one NCCL
  // group); elsewhere just runs them.
  virtual void together(const std::function<void()>& steps) { steps(); }

  // `count` elements of node memory, valid until the schedule ends. At most once per schedule.
  virtual Buffer scratch(size_t count, DataType dtype) = 0;

  // Before any fragment: the most bytes one fragment stages (the size of a slot).
  virtual void reserveSlots(size_t slotBytes) = 0;
  // The host buffer that stands for `piece` (node memory) in fragment f's network step, `offset` bytes
  // into the fragment's slot. On host memory: `piece` itself.
  virtual Buffer hostView(size_t fragment, const Buffer& piece, size_t offset) = 0;
  // As hostView, for a network step that only moves bytes (broadcast, allgather; nothing reduced on the
  // host): where the network takes node memory itself (device memory that UCX takes, ucx/cuda_direct.h),
  // `piece` itself, and copyOut / copyIn between the two are no-ops or copies within node memory.
  virtual Buffer networkView(size_t fragment, const Buffer& piece, size_t offset) {
    return hostView(fragment, piece, offset);
  }
  // `host` gets `piece`'s contents (after the node steps that produced them), or `piece` gets `host`'s
  // (after the network step). In order with the node steps.
  virtual void copyOut(const Buffer& piece, const Buffer& host) = 0;
  virtual void copyIn(const Buffer& host, const Buffer& piece) = 0;
  // Fragment f's copies out are all issued (calling thread) / have landed (network thread; within the
  // collective's deadline, or throws).
  virtual void staged(size_t fragment) = 0;
  virtual void awaitStaged(size_t fragment) = 0;
};

}  // namespace hier::transport::hierarchy
