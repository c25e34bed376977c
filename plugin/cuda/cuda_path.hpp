// ProcessGroupHier's operations on CUDA tensors.
//
// One node (every rank of the group on one host): NCCL, one non-blocking communicator per device over
// the whole group, every collective on a communication stream that waits for the caller's current
// stream (asynchronous calls; the tensors are recorded on that stream for the caching allocator), or on
// the caller's current stream itself (async_op=False). Several nodes: large allreduces, and
// all_gather_into_tensor and reduce_scatter_tensor, take the hierarchical schedules with NCCL inside
// each node and UCX between nodes (acrossNodes); the other operations are staged through pinned host
// memory and run on the group's CPU path, whose hierarchy puts shared memory inside nodes and UCX
// between them. Point-to-point operations always take that path (NCCL's point-to-point would serialise
// with the collectives of the same communicator). A watchdog aborts NCCL when an operation passes its
// deadline, so a lost peer never leaves a stream waiting forever.
#pragma once

#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "plugin/cuda/cuda_work.hpp"
#include "transport/hierarchy/planner.h"
#include "transport/nccl/allreduce_split_rail.h"
#include "transport/nccl/device_rails.h"
#include "transport/nccl/nccl_communicator.h"

namespace hier {

class ProcessGroupHier;

class CudaPath {
 public:
  explicit CudaPath(ProcessGroupHier& group);
  ~CudaPath();

  using Enqueue = std::function<void(cudaStream_t stream, transport::nccl::Communicator& nccl)>;
  // An operation on NCCL (one node): `enqueue` issues it on the stream the call runs on.
  c10::intrusive_ptr<c10d::Work> onNccl(c10d::OpType type, const char* op, std::vector<at::Tensor> inputs,
                                        std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
                                        bool asyncOp, const Enqueue& enqueue);
  // An operation staged through pinned host memory: `hostOp` runs the group's CPU operation on host
  // copies of `inputs` (taking their host outputs) and returns its work; the results are copied back
  // into `outputs`. `hostOutputsOf` picks which host tensors hold the results (same order as outputs).
  using HostOp = std::function<c10::intrusive_ptr<c10d::Work>(std::vector<at::Tensor>& hostInputs,
                                                                std::vector<at::Tensor>& hostOutputs)>;
  c10::intrusive_ptr<c10d::Work> staged(c10d::OpType type, const char* op, std::vector<at::Tensor> inputs,
                                        std::vector<at::Tensor> outputs, bool inPlace, const HostOp& hostOp);

  // An operation on a group spanning several nodes with NCCL inside each node and UCX between them
  // (transport/nccl: allreduce_split_rail.h, device_rails.h). `schedule` runs on the group's executor,
  // in order with the group's other operations, and enqueues the device steps on `stream` (the
  // communication stream; the current one for async_op=False), with `pinnedBytes` of pinned host memory
  // and `scratchBytes` of device scratch.
  using NodeSchedule = std::function<void(transport::Collective& c, transport::nccl::Communicator& node,
                                          cudaStream_t stream, void* pinned, void* scratch)>;
  c10::intrusive_ptr<c10d::Work> acrossNodes(c10d::OpType type, const char* op, const at::Tensor& input,
                                             const at::Tensor& output, std::chrono::milliseconds timeout, bool asyncOp,
                                             size_t pinnedBytes, size_t scratchBytes, NodeSchedule schedule);

  // Whether the group lives on one node (then NCCL carries its CUDA collectives).
  bool oneNode();
  // How the group's ranks spread over hosts (what the planner decides on).
  const transport::hierarchy::Topology& topology();
  void abort();

  // The operations, by the Backend methods' names (cuda_collectives.cpp).
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> allreduceCoalesced(std::vector<at::Tensor>& tensors,
                                                    const c10d::AllreduceCoalescedOptions& opts);
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts);
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> allgatherBase(at::Tensor& output, at::Tensor& input,
                                               const c10d::AllgatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> allgatherCoalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                    const c10d::AllgatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts);
  c10::intrusive_ptr<c10d::Work> reduceScatter(std::vector<at::Tensor>& outputs,
                                               std::vector<std::vector<at::Tensor>>& inputs,
                                               const c10d::ReduceScatterOptions& opts);
  c10::intrusive_ptr<c10d::Work> reduceScatterBase(at::Tensor& output, at::Tensor& input,
                                                   const c10d::ReduceScatterOptions& opts);
  c10::intrusive_ptr<c10d::Work> reduceScatterCoalesced(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::ReduceScatterOptions& opts);
  c10::intrusive_ptr<c10d::Work> alltoallBase(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                                              std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts);
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts);
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag);
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag);
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts);

 private:
  // Per device: the communication stream, and the NCCL communicators, each made on first use (a
  // collective step of the ranks it spans).
  struct Device {
    std::unique_ptr<transport::nccl::Communicator> nccl;  // over the whole group (one node)
    c10::cuda::CUDAStream stream;
    std::unique_ptr<transport::nccl::Communicator> node;  // over this rank's node (several nodes)
  };
  Device& device(const c10::Device& device);
  // A NCCL communicator for `device` over `size` ranks, its unique id under the keys "cuda/<device><keys>".
  std::unique_ptr<transport::nccl::Communicator> makeNccl(const std::string& keys, int rank, int size,
                                                          const c10::Device& device, std::chrono::milliseconds timeout);
  transport::nccl::Communicator& groupNccl(const c10::Device& device, std::chrono::milliseconds timeout);
  transport::nccl::Communicator& nodeNccl(const c10::Device& device, std::chrono::milliseconds timeout);
  // The stream an operation runs on: the caller's current one (async_op=False), or the communication
  // stream made to wait for it, with the tensors recorded on it for the caching allocator.
  c10::cuda::CUDAStream streamFor(const c10::Device& where, bool asyncOp, const std::vector<at::Tensor>& inputs,
                                  const std::vector<at::Tensor>& outputs);
  // Hands `work` to the watchdog: done when `stream` passes this point; aborts NCCL past the deadline.
  // `holds` stays alive until then (memory the device still reads).
  void watch(const c10::intrusive_ptr<CudaWork>& work, const c10::cuda::CUDAStream& stream,
             std::chrono::milliseconds timeout, std::string what, std::shared_ptr<const void> holds = nullptr);
  // After an operation across nodes failed part-way: aborts NCCL and keeps `holds` until the stream drains.
  void abortAfterFailure(const c10::intrusive_ptr<CudaWork>& work, const c10::cuda::CUDAStream& stream,
                         std::chrono::milliseconds timeout, std::string what, std::shared_ptr<const void> holds);
  void watchdogLoop();
  // Refuses what NCCL cannot take (non-contiguous tensors, several devices) with the group's messages.
  void checkForNccl(const char* op, const std::vector<at::Tensor>& tensors);

  ProcessGroupHier& group_;
  std::map<int, Device> devices_;
  std::mutex devicesMutex_;

  struct Watched {
    std::shared_ptr<c10::cuda::CUDAEvent> event;
    std::chrono::steady_clock::time_point deadline;
    c10::intrusive_ptr<CudaWork> work;
    std::string what;
    std::shared_ptr<const void> holds;
  };
  std::mutex watchMutex_;
  std::condition_variable watchChanged_;
  std::vector<Watched> watched_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace hier
