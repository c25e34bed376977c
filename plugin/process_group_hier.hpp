// ProcessGroupHier: the c10d Backend that torch.distributed selects as "hier".
//
// Each call is validated once, on the caller's thread, with the same checks whatever the device (a bad
// argument fails with a message naming the op and the group, and the group stays usable), then routed
// by device: CPU tensors to their body (host_bodies.hpp), queued on the group's executor; CUDA
// tensors to the CUDA path (cuda/cuda_path.hpp). Both work through the group's core (group_core.hpp):
// its sequence numbers, executor, work table, transport and failure. A collective that fails in flight
// (timeout, dead peer, size mismatch) leaves the group unusable, like NCCL's communicators: later calls
// fail at once and say why.
#pragma once

#include <torch/csrc/distributed/c10d/debug.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "plugin/group_core.hpp"
#include "plugin/host_bodies.hpp"
#include "plugin/profiling.hpp"
#include "plugin/work.hpp"
#include "registry/torch_version.hpp"
#include "registry/work_table.hpp"
#include "transport/group/point_to_point.h"

namespace hier {

class CudaPath;

class ProcessGroupHier : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = kBackendDefaultTimeout, bool highPriorityStream = false)
        : c10d::Backend::Options("hier", timeout), is_high_priority_stream(highPriorityStream) {}
    // The group's CUDA streams take the device's greatest priority (ProcessGroupNCCL's option).
    bool is_high_priority_stream = false;
#if HIER_TORCH_HAS_OPTIONS_CLONE
    c10::intrusive_ptr<c10d::Backend::Options> clone() const override { return c10::make_intrusive<Options>(*this); }
#endif
  };

  // `idCounter`: the store whose root holds the job's group-id counter (drawGroupId), `store`'s unless given.
  ProcessGroupHier(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   c10::intrusive_ptr<Options> options = c10::make_intrusive<Options>(),
                   const c10::intrusive_ptr<c10d::Store>& idCounter = nullptr);
  ~ProcessGroupHier() override;

  const std::string getBackendName() const override { return "hier"; }
  // A copy: torch's splitGroup writes the child's name and timeout into what it gets here.
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return c10::make_intrusive<Options>(*options_);
  }
  void setGroupUid(const std::string& name) override;
  void setTimeout(std::chrono::milliseconds timeout) override { core_->setTimeout(timeout); }
  uint64_t getSequenceNumberForGroup() override { return core_->sequence(); }
  void setSequenceNumberForGroup() override {}  // sequence numbers start at 0 on every rank
  c10d::ErrorType getError() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts = {}) override;
  // dist.all_gather_coalesced (deprecated in torch, kept by Gloo): outputs[r][i] receives rank r's inputs[i].
  // CPU tensors only, as with Gloo (NCCL has no such call).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = {}) override;
#if HIER_TORCH_HAS_GATHER_SINGLE
  // dist.gather_single: every rank's `input` into the root's one `output`, in rank order.
  c10::intrusive_ptr<c10d::Work> gather_single(at::Tensor& output, at::Tensor& input,
                                               const c10d::GatherOptions& opts = {}) override;
#endif
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits, std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = {}) override;
  // dist.monitored_barrier, as Gloo's: rank 0 names the ranks that did not come within the timeout.
  // Outside the collectives' numbering (transport::Group::monitoredBarrier): the group stays usable.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;

  void abort() override;
  void shutdown() override;

  // batch_isend_irecv and _coalescing_manager(device=...): the operations issued between the two calls
  // run as they are called, and endCoalescing() returns one Work for them all (coalesced_work.hpp).
  // A startCoalescing() while coalescing drops the open batch (its operations still run), so that an
  // exception inside a coalescing block does not leave the group coalescing for good.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  // Work.get_duration(): CPU work is always timed; CUDA work records timed events from now on.
  void enableCollectivesTiming() override;
  // torch's _register_on_completion_hook: `hook` gets each operation's WorkInfo (op, sequence number,
  // start and end, the time between) once it finished, succeeded or failed, on a thread of the group's
  // own, in the order they finished. One hook per group, as with ProcessGroupNCCL.
  void registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override;
#if HIER_TORCH_HAS_COMPLETION_HOOKS
  // torch 2.15's keyed completion hooks: each gets the completion key (Work::getCompletionKey) and the
  // duration of every operation that succeeded, once, on the group's hook thread, in the order they
  // finished (GroupCore::registerCompletionHook). Failed operations fire nothing, as torch asks.
  bool supportsCompletionHooks() const override { return true; }
  void registerCompletionHook(int64_t id, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t id) override { core_->unregisterCompletionHook(id); }
#endif
#if HIER_TORCH_HAS_EPHEMERAL_TIMEOUT
  // torch's _add_ephemeral_timeout: operations issued from now on get `timeout` more, until the first of
  // them finished (GroupCore::addEphemeralTimeout).
  void addEphemeralTimeout(const std::chrono::milliseconds& timeout) override { core_->addEphemeralTimeout(timeout); }
#endif
#if HIER_TORCH_HAS_ABORT_HOOKS
  // torch's register_abort_hook: each hook runs before the group aborts, or fails for a failure in flight,
  // on the thread that found it, as often as that happens (torch asks hooks to be idempotent).
  bool supportsAbortHooks() const override { return true; }
  void registerAbortHook(int64_t id, c10d::AbortHook hook) override { core_->registerAbortHook(id, std::move(hook)); }
  void unregisterAbortHook(int64_t id) override { core_->unregisterAbortHook(id); }
#endif
  // torch's _wait_for_pending_works (destroy_process_group calls it when a hook is registered): the host
  // waits, within the group's timeout, until every collective issued so far finished (on the host, and on
  // the device for CUDA ones) and the completion hook saw each. A failure stays with its work. Point-to-
  // point works finish when somebody waits for them or polls them; those nobody did are not waited for.
  void waitForPendingWorks() override;

  // torch's shrink_group: the ranks not excluded make a new, smaller hier group on this group's store
  // (no new global rendezvous), numbered in their old order. SHRINK_ABORT aborts this group's pending work
  // first. Every survivor calls it with the same list, as torch requires.
  bool supportsShrinking() const override { return true; }
  // dist.split_group, DeviceMesh and init_process_group(device_id=...): the ranks in `ranks` (of this
  // group, sorted) make a new hier group on `store` (torch's, under the child's name); the others get
  // null. Each member calls it; no global rendezvous beyond the child's own.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  // ProcessGroup.merge_remote_group: a new group of `size` ranks, this one `rank` of it, meeting on `store`
  // (the caller's; the group keeps a clone). Its members may come from several groups, each calling it
  // with the same store and size; torch numbers them in the order they reach the store.
  c10::intrusive_ptr<c10d::Backend> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts, const int& rank,
                                          const int& size) override;
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<int64_t>& ranksToExclude, int shrinkFlags = 0,
      const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride = nullptr) override;

#if HIER_TORCH_HAS_RECONFIGURE
  // torch's fault-tolerance membership change (dist._reconfigure): the ranks whose handles `opts` lists
  // (get_reconfigure_handle(), exchanged by the caller) become this group's members, numbered by the list's
  // order (sorted, for a set), meeting under `opts.uuid` on this group's store. What was in flight fails;
  // the hooks stay; the call returns once the new group is made (a completed Work). Each listed rank calls
  // it with the same list and uuid, and no other thread uses the group meanwhile. A group made with
  // enable_reconfigure works on its first members until then.
  bool supportsReconfigure() const override { return true; }
  c10d::ReconfigureHandle get_reconfigure_handle() const override { return handle_; }
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#endif

#if HIER_TORCH_HAS_WINDOW
  // dist._new_window: a one-sided window on CPU tensors (window.hpp), `tensor` registered when given.
  // Collective: every rank makes the group's windows in the same order.
  bool supportsWindow() const override { return true; }
  c10::intrusive_ptr<c10d::Window> new_window(const std::optional<at::Tensor>& tensor = std::nullopt) override;
#endif

  // init_process_group(device_id=...) (torch's eager init): what the group's first operation on `device`
  // would set up, now, on every rank alike: the ranks' hosts, on the CPU the shared memory and sub-groups
  // too (transport::Group::prepare), on a CUDA device its NCCL communicator, so that the first collective
  // does not pay for it and groups split from this one take theirs from it.
  void eagerConnectSingleDevice(at::Device device) override;

  // new_group on a parent bound to a CUDA device (torch hands the creator the parent as split_from): this
  // group takes its NCCL communicator on cuda:`device` from the parent's, where the parent has one
  // (CudaPath::splitCommunicator); performNocolorSplit is the parent's part on a rank outside the new
  // group (torch's perform_nocolor_split). Nothing where the parent has no communicator there yet.
  void splitCudaFrom(ProcessGroupHier& parent, int device);
  void performNocolorSplit(int device);
  // What the creator does once torch made the group. `parent` (the job's default group, where there is
  // one on hier): a group whose members are all in it takes the ranks' records from it, and its host
  // facts (transport::Group::learnFrom), instead of finding them out again, where the parent issued a
  // collective or set up eagerly before: each of those learns the records on every rank of the parent
  // (runOperation), and every rank of this group sees alike whether there was one, having issued the same
  // calls before it made this group. Then, with HIER_EAGER_INIT=1, the group sets up what its first
  // collective would (prepare()).
  void start(ProcessGroupHier* parent);

  const std::string& groupName() const { return core_->name(); }
  // Whether prepare() learned the ranks' records, on every rank alike (it is collective).
  bool prepared() const { return prepared_.load(); }
  uint32_t groupId() const { return core_->groupId(); }
  // The group's operations: in flight, never waited for, and recently finished.
  const registry::WorkTable& workTable() const { return core_->works(); }

 private:
  friend class WindowHier;  // its puts and signals are this group's point-to-point works
  // How many window registrations this group made: each one's number (its signals' tag).
  std::atomic<uint32_t> windows_{0};
  // TORCH_DISTRIBUTED_DEBUG=DETAIL (as torch.distributed read it when this group was made): CUDA
  // collectives take the agreement CPU ones always take (CudaPath::Call::terms).
  const bool checksCuda_ = c10d::debug_level() == c10d::DebugLevel::Detail;
  int globalRankStart_ = 0;  // for the profiler's record_param_comms events
  int globalRankStride_ = 1;
  ProfiledGroup profiledGroup() const;
  // allreduce of a sparse COO tensor (host::allreduceSparse); inside allreduce's refusable().
  c10::intrusive_ptr<c10d::Work> allreduceSparse(at::Tensor& tensor, const c10d::AllreduceOptions& opts);
  // Where a call's tensors are, after the checks every tensor gets: defined, dense, all on the CPU or all
  // on one CUDA device, which this build carries.
  enum class On { Cpu, Cuda };
  On placement(const char* op, const std::vector<at::Tensor>& tensors) const;
  // The CUDA path, made on the first CUDA tensor (process_group_calls.cpp routes to it).
  CudaPath& cuda();
  // The CUDA device this group last ran an operation on; none when it never used CUDA. Never a road's
  // choice (a peer does not know it): what a barrier that names no device drains first.
  std::optional<c10::Device> lastCudaDevice();
  [[noreturn]] void invalid(const char* op, const std::string& what) const { core_->invalid(op, what); }
  // What a work calls on Work::abort(): this group's abort, while the group lives.
  WorkHier::AbortHandler abortHandler();
  // This group, held weakly, for what may outlive it (its works). Not in the constructor: it needs the
  // group's owner.
  c10::weak_intrusive_ptr<ProcessGroupHier> weakSelf();
  // Every public call's work passes here on its way out: inside a coalescing block it joins the batch.
  c10::intrusive_ptr<c10d::Work> issued(c10::intrusive_ptr<c10d::Work> work);

  // Queues a validated CPU collective: once the ranks agreed on `terms`, `body` runs on the executor;
  // `outputs` are the future's value; `peers` names the root of a rooted collective in the work table.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* op, c10::ArrayRef<at::Tensor> inputs,
                                         std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
                                         bool asyncOp, Body body, Terms terms, const std::string& peers = {});
  // gather's and gather_single's routing, once their checks made `outs` (the root's parts; empty elsewhere).
  c10::intrusive_ptr<c10d::Work> gatherInto(const char* op, const at::Tensor& input,
                                            const std::vector<at::Tensor>& outs, int root,
                                            const c10d::GatherOptions& opts);
  // Runs `call` (a collective's checks, then its routing). When this rank refuses a call on CPU tensors
  // (a Refusal from the checks), the refusal first takes the collective's place in the agreement the
  // other ranks run, so that they raise at once too and every rank stays in step; then it is raised.
  template <typename Call>
  c10::intrusive_ptr<c10d::Work> refusable(c10d::OpType type, const char* op, std::chrono::milliseconds timeout,
                                           const std::vector<at::Tensor>& tensors, Call&& call);
  void refuse(c10d::OpType type, const char* op, std::chrono::milliseconds timeout, const std::string& why);
  c10::intrusive_ptr<c10d::Work> pointToPoint(c10d::OpType type, const char* op, at::Tensor& tensor, int peer, int tag);
  // Its checked request, as one transfer. `profilingTitle` is null when nobody profiles.
  c10::intrusive_ptr<c10d::Work> postPointToPoint(c10d::OpType type, const char* op, at::Tensor& tensor, int peer,
                                                  int tag, uint64_t sequence, const char* profilingTitle);
  // The work of one transfer that `post` issues (a point-to-point message, a window's put or signal), to
  // finish within `timeout` (kUnsetTimeout: the group's): it finishes when the transfer settles. `name`
  // names its point-to-point sequence number and peer; the work holds `inputs` and `outputs`.
  using PostTransfer = std::function<std::shared_ptr<transport::Transfer>(
      const transport::Deadline&, std::shared_ptr<const void> keepalive,
      std::function<void(const transport::TransferOutcome&)> onSettled)>;
  c10::intrusive_ptr<c10d::Work> postTransfer(c10d::OpType type, OperationName name, std::vector<at::Tensor> inputs,
                                              std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
                                              const char* profilingTitle, const PostTransfer& post);

  c10::intrusive_ptr<c10d::Store> store_;  // the group's own store: where a shrunk group rendezvouses
  // Whose root holds the job's group-id counter: store_ but for a merged group; its children's too.
  const c10::intrusive_ptr<c10d::Store> idCounter_;
  c10::intrusive_ptr<Options> options_;
  // This group's rank of global rank `global` (torch's default group lists none: its ranks are global);
  // findGlobal: none where it is not a member.
  int rankOfGlobal(uint64_t global) const;
  std::optional<int> findGlobal(uint64_t global) const;
  // The CUDA path, if a CUDA operation made it; null otherwise.
  std::shared_ptr<CudaPath> cudaIfMade();
  // This group's CUDA path when it has a NCCL communicator on cuda:`device`, to split; else null.
  std::shared_ptr<CudaPath> splittable(int device);
  int shrinks_ = 0;  // how many groups this core has shrunk into: keys each shrink's rendezvous apart
  std::atomic<bool> prepared_{false};
  bool reconfigured_ = false;  // its ranks no longer tell global ranks
  void learnFrom(ProcessGroupHier& parent);
  // The ranks' records now, and with `hostMemory` what host collectives set up on first use
  // (transport::Group::prepare); `op` names it in errors.
  void prepare(const char* op, bool hostMemory);
  // A split's or merge's new group's options: torch's `opts` (its name, its timeout), this group's stream
  // priority unless `opts` are hier options with their own.
  c10::intrusive_ptr<Options> childOptions(const c10::intrusive_ptr<c10d::Backend::Options>& opts) const;
  // The group's core on `store`, its operations' timeout `timeout` (`idCounter`: where the group id is drawn,
  // drawGroupId, waiting up to `idWait` for rank 0 to publish it).
  static std::unique_ptr<GroupCore> makeCore(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                             const std::string& name, std::chrono::milliseconds timeout,
                                             c10d::Store* idCounter, std::chrono::milliseconds idWait);
  std::unique_ptr<GroupCore> core_;
  // This rank in reconfigure's lists: unique to this group object, job-wide ("hier:<host>:<pid>:<n>").
  const std::string handle_;
  std::set<int64_t> reconfiguredWith_;  // the uuids this group's reconfigures used
  std::once_flag abortHandlerOnce_;
  WorkHier::AbortHandler abortHandler_;
  std::mutex coalescingMutex_;
  std::optional<std::vector<c10::intrusive_ptr<c10d::Work>>> coalescing_;  // the open batch
  std::mutex cudaMutex_;
  bool timing_ = false;  // enableCollectivesTiming(); under cudaMutex_
  // shared_ptr: deletable where CudaPath is incomplete (CPU-only builds). Goes before core_.
  std::shared_ptr<CudaPath> cuda_;
  // What reconfigure replaced, closed: kept while the group lives, as its queued tasks and works may
  // still refer to them. The CUDA paths go before the cores they work through.
  std::vector<std::unique_ptr<GroupCore>> retiredCores_;
  std::vector<std::shared_ptr<CudaPath>> retiredCuda_;
  // Windows dropped while registered (~WindowHier): their memory and registration, kept from peers'
  // late puts until the group goes. Before the cores, whose transports they use.
  std::mutex windowsLeftMutex_;
  std::vector<std::shared_ptr<void>> windowsLeft_;
};

}  // namespace hier
