// ProcessGroupHier: the c10d Backend that torch.distributed selects as "hier".
//
// It validates each call (a bad argument fails on the calling thread with a message naming the op and
// the group, and the group stays usable), gives it the group's next sequence number, and hands it to the
// group's executor, which runs the transport collective with the op's deadline. A collective that fails
// in flight (timeout, dead peer, size mismatch) leaves the group unusable, like NCCL's communicators:
// later calls fail at once and say why.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plugin/executor.hpp"
#include "plugin/work.hpp"
#include "registry/work_table.hpp"
#include "transport/collective.h"
#include "transport/communicator.h"

namespace hier {

class StoreBootstrap;
class CudaPath;

class ProcessGroupHier : public c10d::Backend {
 public:
  struct Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
        : c10d::Backend::Options("hier", timeout) {}
    c10::intrusive_ptr<c10d::Backend::Options> clone() const override {
      return c10::make_intrusive<Options>(*this);
    }
  };

  ProcessGroupHier(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   c10::intrusive_ptr<Options> options = c10::make_intrusive<Options>());
  ~ProcessGroupHier() override;

  const std::string getBackendName() const override { return "hier"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }
  void setGroupUid(const std::string& name) override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  uint64_t getSequenceNumberForGroup() override { return sequence_; }
  void setSequenceNumberForGroup() override {}  // sequence numbers start at 0 on every rank
  c10d::ErrorType getError() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = {}) override;
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
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = {}) override;

  void abort() override;
  void shutdown() override;

  const std::string& groupName() const { return groupName_; }
  uint32_t groupId() const { return groupId_; }
  // The group's operations: in flight, never waited for, and recently finished.
  const registry::WorkTable& workTable() const { return *works_; }

 private:
  friend class CudaPath;
  // The CUDA path, made on the first CUDA tensor; null in builds without CUDA.
  CudaPath* cuda();
  std::shared_ptr<CudaPath> cuda_;  // shared_ptr: deletable where CudaPath is incomplete (CPU-only builds)
  std::mutex cudaMutex_;

  // What a queued collective runs with: its deadline, the tensors to keep alive, and a fresh transport
  // sequence number for each transport collective it runs.
  class Running {
   public:
    Running(transport::Communicator& communicator, uint64_t& sequence, std::chrono::milliseconds timeout,
            std::shared_ptr<const void> keepalive)
        : communicator_(communicator), sequence_(sequence), timeout_(timeout), keepalive_(std::move(keepalive)) {}
    // Each transport collective of the operation gets its own tag space.
    transport::Collective next() { return transport::Collective(communicator_, sequence_++, timeout_, keepalive_); }

   private:
    transport::Communicator& communicator_;
    uint64_t& sequence_;
    std::chrono::milliseconds timeout_;
    std::shared_ptr<const void> keepalive_;
  };
  using Body = std::function<void(Running&)>;

  // Names an operation in messages: "hier: <op> on group '<name>' (seq <n>, rank <r>/<size>)".
  std::string label(const char* op, uint64_t sequence) const;
  std::string label(const char* op) const { return label(op, sequence_); }
  // Throws the convention's error for a bad argument: nothing was sent, the group stays usable.
  [[noreturn]] void invalid(const char* op, const std::string& what) const;

  // Queues a validated collective. `body` runs on the executor; `outputs` are the future's value;
  // `root` is the root rank of a rooted collective, for the work table.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* op, std::vector<at::Tensor> inputs,
                                         std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
                                         bool asyncOp, Body body, int root = -1);
  // The work table's row for a new operation.
  registry::WorkTable::Row addRow(uint64_t sequence, bool pointToPoint, const char* op,
                                  const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                                  std::string peers);
  // After a timeout or a peer failure: writes the work table out (text and JSON) with what the other
  // ranks reported, logs it, and returns where it went.
  std::string dumpWorkTable(uint64_t sequence, const std::vector<std::pair<int, std::string>>& reports,
                            const std::vector<int>& silent);
  // Warns about the operations nobody waited for; at shutdown.
  void warnUnwaited() const;
  void run(WorkHier& work, const char* op, uint64_t sequence, std::chrono::milliseconds timeout,
           std::shared_ptr<const void> keepalive, const Body& body);
  // Turns a transport failure into the error the work reports, asking the other ranks (through the
  // store) which of them reached the collective.
  std::exception_ptr explainFailure(const char* op, uint64_t sequence, const transport::Error& error,
                                    std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeoutOf(std::chrono::milliseconds requested) const;
  void checkUsable(const char* op) const;

  c10::intrusive_ptr<c10d::Work> pointToPoint(c10d::OpType type, const char* op, at::Tensor& tensor, int peer, int tag);
  void checkTensor(const char* op, const at::Tensor& tensor) const;

  c10::intrusive_ptr<Options> options_;
  std::string groupName_;
  std::shared_ptr<registry::WorkTable> works_;
  uint32_t groupId_ = 0;
  std::shared_ptr<StoreBootstrap> bootstrap_;
  std::unique_ptr<transport::Communicator> communicator_;
  Executor executor_;
  // Completes point-to-point works and their futures off UCX's callback context.
  Executor completions_;

  std::atomic<uint64_t> sequence_{0};   // collectives issued: the same on every rank
  std::atomic<uint64_t> p2pSequence_{0};
  uint64_t transportSequence_ = 0;      // transport collectives run; owned by the executor
  std::atomic<std::chrono::milliseconds::rep> timeoutMs_;

  mutable std::mutex failureMutex_;
  std::string failure_;  // why the group became unusable; empty while it is fine
  std::atomic<bool> shutDown_{false};
};

}  // namespace hier
