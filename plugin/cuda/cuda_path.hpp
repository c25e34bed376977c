// A group's operations on CUDA tensors, once ProcessGroupHier validated them (the same checks as for CPU
// tensors). Every operation is enqueued whole from the caller's thread, in its program order, and the
// call returns (ProcessGroupNCCL's contract): each device step goes on the operation's stream (the
// group's own communication stream made to wait for the caller's current one, the tensors recorded on
// it for the caching allocator; the current stream itself for async_op=False). A stage that runs on the
// host (a network step between hosts, a host reduction) runs later on the group's executor, in turn
// with the group's other host work, and the device steps after it wait behind a stream gate
// (transport/nccl/stream_gate.h) that the host stage opens when it is done, or gave up. Each collective
// goes the road of the row its collective's table gives it (transport/select/algorithm_table.h), the
// table CPU tensors choose from:
//
//   NCCL          the group lives on one host: NCCL over the whole group, enqueued here; the executor
//                 is not involved, so no NCCL call of any group is issued from another thread.
//   schedule      a hierarchical schedule of transport/hierarchy, written once for host and device
//                 memory, run in two passes (node_steps.h): here, every node step (NCCL over each host's
//                 ranks, transport::nccl::DeviceNodeSteps) with the spreads behind gates; then on the
//                 executor, the network steps over UCX, through pinned slots or on the device buffers.
//   staged        what neither takes (an op NCCL lacks, an op with no hierarchical schedule, one rank per
//                 host): copies to pinned host memory, a gate and the copies back, enqueued here; the
//                 group's CPU collective on the executor between them.
//
// Under TORCH_DISTRIBUTED_DEBUG=DETAIL the ranks agree on the call first, on the executor, while the
// caller waits (agreeNow): a refused call enqueues nothing.
//
// NCCL's rule for several communicators on one device ("Using multiple NCCL communicators
// concurrently"): a kernel waiting for its peers can keep another communicator's from running, so every
// rank must issue their operations in the same order. Every NCCL call of every hier group is issued from
// the caller's thread, in its program order; the host stages between gates issue none. Not ruled out: a
// device synchronization inside an enqueue, such as a miss of torch's pinned-memory cache (cudaHostAlloc)
// when a staged operation or a schedule's slots are allocated.
//
// Point-to-point goes through pinned host memory and UCX, never the executor, so a send waiting for its
// receiver does not hold up the group's collectives: a send's copy out is enqueued here and its message
// posted by a thread of its own; a receive's copy in is enqueued here behind a gate the message opens.
// A watchdog (cuda_watchdog) follows every operation to the end of its device part, completes its
// result then, and aborts NCCL when one passes its deadline or NCCL reports a failed peer; whenever NCCL
// is aborted the group is marked failed. CudaPath works through GroupCore alone.
#pragma once

#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plugin/cuda/cuda_plan.hpp"
#include "plugin/cuda/cuda_watchdog.hpp"
#include "plugin/cuda/cuda_work.hpp"
#include "plugin/executor.hpp"
#include "plugin/group_core.hpp"
#include "plugin/host_bodies.hpp"
#include "plugin/operation.hpp"
#include "plugin/profiling.hpp"
#include "transport/flat/shape.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/nccl/nccl_communicator.h"

namespace hier {

// Tells the transport, once per process, which GPU's nearest network device UCX should take
// (cuda_plan::networkDeviceGpu); before the first group makes the process's UCX engine.
void noteGpuForNetworkDevices();

class CudaPath : public std::enable_shared_from_this<CudaPath> {
 public:
  // `highPriority`: the group's streams take the device's greatest priority (Options). `describe`: the
  // group as the profiler names it (profiling.hpp), asked for while somebody profiles.
  CudaPath(GroupCore& core, bool highPriority, std::function<ProfiledGroup()> describe);
  // close(), if nobody did.
  ~CudaPath();

  // What ProcessGroupHier tells of a validated call.
  struct Call {
    c10d::OpType type;
    const char* op;
    std::chrono::milliseconds timeout;  // kUnsetTimeout: the group's
    bool asyncOp;
    std::string peers;  // for the work table: "root 2"; empty for the whole group
    // Under TORCH_DISTRIBUTED_DEBUG=DETAIL: what the ranks agree on before the call reaches the device
    // (transport/agreement.h), as a CPU collective's; none otherwise, as the check costs a host round trip.
    std::optional<Terms> terms;
  };
  using Work = c10::intrusive_ptr<c10d::Work>;

  // The collectives, by the Backend methods they serve (cuda_calls.cpp).
  Work allreduce(const at::Tensor& tensor, const host::Reduction& reduction, const Call& call);
  Work allreduceCoalesced(const std::vector<at::Tensor>& tensors, const std::vector<host::Reduction>& reductions,
                          const Call& call);
  Work broadcast(const at::Tensor& tensor, int root, const Call& call);
  Work reduce(const at::Tensor& tensor, const host::Reduction& reduction, int root, const Call& call);
  Work allgather(const at::Tensor& input, const std::vector<at::Tensor>& outputs, const Call& call);
  Work allgatherIntoTensor(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                           const Call& call);
  // outputs[r][i] receives rank r's inputs[i].
  Work allgatherCoalesced(const std::vector<at::Tensor>& inputs, const std::vector<std::vector<at::Tensor>>& outputs,
                          const Call& call);
  Work gather(const at::Tensor& input, const std::vector<at::Tensor>& outputs, int root, const Call& call);
  Work scatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output, int root, const Call& call);
  Work reduceScatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output, const host::Reduction& reduction,
                     const Call& call);
  Work reduceScatterTensor(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                           const std::vector<host::Reduction>& reductions, const Call& call);
  Work alltoallSingle(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& inRows,
                      const std::vector<int64_t>& outRows, const Call& call);
  Work alltoall(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs, const Call& call);
  Work barrier(const c10::Device& device, const Call& call);
  // Waits, asleep and within the group's timeout, until the device has run what is queued on the
  // caller's current stream and on this group's stream of `device` (a barrier that names no device,
  // before the CPU barrier).
  void drain(const c10::Device& device);
  // Waits, until `deadline`, until the device passed the end of every operation the group enqueued.
  void awaitDevice(const transport::Deadline& deadline) { watchdog_->drain(deadline); }
  // The CUDA device this group last ran an operation on, if any: the one a barrier that names no device
  // drains before the CPU barrier.
  std::optional<c10::Device> lastDevice() const;
  // Point-to-point (cuda_point_to_point.cpp); `peer` -1: a receive from any rank. `batching`: inside a
  // batch (ProcessGroupHier's coalescing, batch_isend_irecv): on a group of one host, a send or receive
  // with a named peer waits for endBatch, which enqueues the batch as one NCCL group on the group's
  // communicator, as ProcessGroupNCCL does (both ends must batch; a group's first batch needs every
  // rank, which makes the communicator). Everything else goes through UCX at once.
  Work send(const at::Tensor& tensor, int peer, int tag, bool batching = false);
  Work recv(const at::Tensor& tensor, int peer, int tag, bool batching = false);
  void endBatch();
  // Work.get_duration() for the operations issued from now on (never those captured in a graph).
  void enableTiming() { timing_.store(true); }

  // A group split from this one (new_group on a parent bound to a device, split_group) takes its NCCL
  // communicator on `where` from this group's with ncclCommSplit, which every rank of this group's
  // communicator calls in the same program order (`plan`: cuda_plan::splitOf; a rank outside the child
  // passes no color and gets null). Null too where this group has no communicator on `where`: then no
  // rank splits, and the child makes its own at its first operation. The child takes what it gets with
  // adoptCommunicator, before its first operation on `where`.
  bool hasCommunicator(const c10::Device& where);
  // Makes the NCCL communicator on `where` now, if there is none (eager init). Every rank calls it alike.
  void connect(const c10::Device& where);
  std::shared_ptr<transport::nccl::Communicator> splitCommunicator(const c10::Device& where,
                                                                   const cuda_plan::SplitPlan& plan);
  void adoptCommunicator(const c10::Device& where, std::shared_ptr<transport::nccl::Communicator> comm);

  // Aborts NCCL, fails what is in flight and marks the group failed. From any thread.
  void abort(const std::string& why);
  // Lets the device finish what is enqueued and closes the NCCL communicators, within a bounded time
  // (the group's timeout, at most kShutdownGrace); aborts them instead when that passes (a peer is gone).
  // Memory the device might still use is never freed under it.
  void close();

  static constexpr std::chrono::seconds kShutdownGrace{10};

 private:
  // What NCCL and the schedules' node steps take: contiguous tensors, and with `separate` no output
  // sharing memory with an input (all-to-all). A tensor of the call that is not so is replaced by a
  // contiguous copy, made on the caller's current stream (which the operation's stream waits for); an
  // output's copy is copied back on the operation's stream after the operation's last step. So whether a
  // call takes NCCL never depends on one rank's memory layout (ProcessGroupNCCL refuses such tensors).
  struct DeviceTensors {
    DeviceTensors(const std::vector<at::Tensor>& callInputs, const std::vector<at::Tensor>& callOutputs, bool inPlace,
                  bool separate = false);
    std::vector<at::Tensor> inputs, outputs;
    std::vector<std::pair<at::Tensor, at::Tensor>> copiedBack;  // (the copy written, the call's output)
    std::vector<at::Tensor> copies;                             // every copy: held and recorded on the stream
    // Enqueues the copies back on `stream`.
    void copyBack(const c10::cuda::CUDAStream& stream) const;
  };
  using Enqueue = std::function<void(cudaStream_t stream, transport::nccl::Communicator& nccl,
                                     const transport::Deadline& deadline)>;
  using Schedule = std::function<void(transport::Collective& c, transport::hierarchy::NodeSteps& node)>;
  using HostBody =
      std::function<Body(const std::vector<at::Tensor>& hostInputs, const std::vector<at::Tensor>& hostOutputs)>;

  // The three roads (see the header comment), each an operation of operation.hpp. `inPlace`: the
  // outputs are the inputs.
  // The call's own tensors make the work and its result; the enqueue or the schedule works on `device`'s.
  Work onNccl(const Call& call, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
              const DeviceTensors& device, const Enqueue& enqueue);
  Work acrossHosts(const Call& call, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                   const DeviceTensors& device, Schedule schedule);
  Work staged(const Call& call, const c10::Device& where, const std::vector<at::Tensor>& inputs,
              const std::vector<at::Tensor>& outputs, bool inPlace, HostBody body);

  // What a point-to-point call starts with (cuda_point_to_point.cpp).
  struct PointToPoint {
    c10::intrusive_ptr<CudaWork> work;
    c10::Device where;
    c10::cuda::CUDAStream current;  // the caller's
    c10::cuda::CUDAStream p2p;      // the copies': sends' and batches', or receives' (Device)
    std::chrono::milliseconds timeout;
    std::string description;
  };
  // `throughHost`: UCX carries it (a capture is refused).
  PointToPoint startPointToPoint(c10d::OpType type, const at::Tensor& tensor, int peer, int tag, bool throughHost);
  // A send or receive kept for endBatch, or null when it does not join the batch.
  c10::intrusive_ptr<CudaWork> batched(c10d::OpType type, const at::Tensor& tensor, int peer, int tag, bool batching);
  struct Batched {
    PointToPoint call;
    at::Tensor tensor;
    int peer;
  };

  // Per CUDA device this rank used: the communication stream, the streams of point-to-point copies (all
  // the group's alone, stream_leases.hpp), and the NCCL communicator (cuda_plan::ncclCommunicator),
  // made on first use by one thread while the others wait. Receives through UCX have streams of their
  // own, one per peer (-1: from any), as ProcessGroupNCCL's point-to-point has one per pair: each waits
  // behind a gate until its message comes, and neither a send nor a receive from another peer may wait
  // behind that (two ranks that each receive, then send, would wait for each other).
  struct Device {
    c10::cuda::CUDAStream stream;
    c10::cuda::CUDAStream p2p;
    std::map<int, c10::cuda::CUDAStream> receivesFrom;
    int priority;
    std::shared_ptr<transport::nccl::Communicator> nccl;
    bool making = false;
  };
  Device& device(const c10::Device& where);
  c10::cuda::CUDAStream receiveStream(const c10::Device& where, int peer);
  transport::nccl::Communicator& communicator(const c10::Device& where, std::chrono::milliseconds timeout);
  const transport::Topology& topology() { return core_.topology(); }
  // The call's shape as its collective's table reads it: device memory, this group's ranks and hosts,
  // whether NCCL takes the tensors, how many tensors the call coalesces.
  transport::Shape shapeOf(size_t bytes, size_t count, bool ncclTakes, size_t tensors = 1);
  // The row of `table` for this call (cuda_calls.cpp); a HIER_ALGORITHMS item that cannot serve
  // CUDA tensors fails the call here, naming the op and the group.
  template <typename Row>
  const Row& chosen(const Call& call, transport::CollectiveKind kind, std::span<const Row> table,
                    const transport::Shape& shape);
  // The stream an operation runs on: the caller's current one (async_op=False), or the communication
  // stream made to wait for it, with the tensors recorded on it for the caching allocator.
  c10::cuda::CUDAStream streamFor(const c10::Device& where, bool asyncOp, const std::vector<at::Tensor>& inputs,
                                  const std::vector<at::Tensor>& outputs);
  // Ran the agreement on `terms` (TORCH_DISTRIBUTED_DEBUG=DETAIL) in turn on the executor, waiting
  // for it; its error when the ranks did not agree or the group failed.
  std::exception_ptr agreeNow(const Issued& operation, const Terms& terms, const transport::Deadline& deadline);
  // How long the watchdog waits past an operation's deadline when a host stage of it gates the device:
  // that stage fails itself at the deadline and then opens its gates.
  static constexpr std::chrono::seconds kHostStageGrace{2};
  // Hands `work`, whose last step is now enqueued on `stream`, to the watchdog, with the memory the
  // device uses until then.
  void watch(const c10::cuda::CUDAStream& stream, const c10::intrusive_ptr<CudaWork>& work, const char* op,
             std::chrono::milliseconds timeout, std::shared_ptr<const void> holds);
  // The same with `end` recorded earlier (endOf): for an operation whose last step waits behind a gate
  // for long (a receive), handed over once the gate opened, so that the watchdog, which follows its
  // operations in order, is not held up by it.
  static std::shared_ptr<c10::cuda::CUDAEvent> endOf(const c10::cuda::CUDAStream& stream);
  void watch(std::shared_ptr<c10::cuda::CUDAEvent> end, const c10::intrusive_ptr<CudaWork>& work, const char* op,
             std::chrono::milliseconds timeout, std::shared_ptr<const void> holds);
  // With collective timing on, starts `work`'s timer on `stream`, where its first device step goes next.
  void startTimer(CudaWork& work, const c10::cuda::CUDAStream& stream);
  c10::intrusive_ptr<CudaWork> makeWork(const Call& call, uint64_t sequence, const std::vector<at::Tensor>& inputs,
                                        const std::vector<at::Tensor>& outputs, const c10::Device& where,
                                        bool blocking = false);
  // The failure handling the roads on NCCL add to every operation's (operation.hpp): a transport failure
  // goes through fail(); a local one part-way aborts NCCL and what is in flight.
  FailureHooks failureHooks();
  // A failure of `op`: GroupCore's words for it; when NCCL was aborted (cuda_plan::failsGroup) the group
  // fails too, and so does everything in flight.
  std::exception_ptr fail(const char* op, uint64_t sequence, const transport::Error& error,
                          std::chrono::milliseconds timeout);
  // The watchdog's news: an operation past its deadline, or (null) a failed NCCL peer.
  void deviceFailed(const Watchdog::Watched* watched, const transport::Error& error);
  std::optional<transport::Error> asyncError();
  void abortNccl();
  // Whether waits for the device should give up: the group was aborted or failed, or is closing.
  bool givingUp() const;
  bool ncclAborted();
  std::vector<std::shared_ptr<transport::nccl::Communicator>> communicators();

  GroupCore& core_;
  const bool highPriority_;
  const std::function<ProfiledGroup()> describe_;
  std::atomic<bool> timing_{false};
  std::mutex devicesMutex_;  // never held across a NCCL call or a wait on peers
  std::condition_variable devicesChanged_;
  std::map<int, Device> devices_;
  std::atomic<int> lastDevice_{-1};
  std::vector<std::shared_ptr<transport::nccl::Communicator>> pending_;  // being made; abort() reaches them
  int madeCommunicators_ = 0;
  bool aborted_ = false;
  std::atomic<bool> stopping_{false};  // abort() or close() began
  bool closed_ = false;
  std::unique_ptr<Watchdog> watchdog_;
  // Sends post in issue order once their copy landed.
  Executor sends_;
  std::mutex batchMutex_;
  std::vector<Batched> batch_;  // kept for endBatch
};

}  // namespace hier
