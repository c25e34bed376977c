// WindowHier: a hier group's one-sided window (torch 2.14's c10d::Window, from dist._new_window), on CPU
// tensors, through UCX's RMA (transport/window/window.h).
//
// As torch's NCCL window, whose contract this follows: every rank registers a tensor (collectively;
// sizes and dtypes may differ by rank); put() writes a tensor of the destination's dtype into its
// window at an element offset and then signals it; signal() signals alone, after every earlier put to
// that rank; wait_signal() consumes the next signal from a rank, so a rank that waits once per put
// (or per signal) sees every write that came before. map_remote_tensor() maps this rank's own window
// only, and get_attr() reports SEPARATE: peers' memory is reached through put alone. Each registration
// takes a number of its own from the group (its signals' tag): a signal left over from an earlier one
// cannot satisfy a later one's wait.
#pragma once

#include "registry/torch_version.hpp"

#if HIER_TORCH_HAS_WINDOW

#include <torch/csrc/distributed/c10d/Window.hpp>

#include <memory>
#include <mutex>
#include <vector>

#include "plugin/process_group_hier.hpp"
#include "transport/window/window.h"

namespace hier {

class WindowHier : public c10d::Window {
 public:
  explicit WindowHier(c10::intrusive_ptr<ProcessGroupHier> group);
  // Without a deregistration: waits for this rank's writes, then leaves the registered memory to the
  // group until it closes, as peers may still write into it.
  ~WindowHier() override;

  void tensor_register(const at::Tensor& tensor, bool owning = true) override;
  void tensor_deregister() override;
  c10::intrusive_ptr<c10d::Work> put(const at::Tensor& tensor, int64_t dstRank, int64_t targetOffsetNelems,
                                     bool asyncOp, const c10d::PutOptions& opts = c10d::PutOptions()) override;
  c10::intrusive_ptr<c10d::Work> signal(int64_t peerRank, bool asyncOp,
                                        const c10d::SignalOptions& opts = c10d::SignalOptions()) override;
  c10::intrusive_ptr<c10d::Work> wait_signal(int64_t peerRank, bool asyncOp,
                                             const c10d::WaitSignalOptions& opts = c10d::WaitSignalOptions()) override;
  at::Tensor map_remote_tensor(int64_t rank) override;
  c10d::WindowAttr get_attr(int64_t peerRank) override;

 private:
  GroupCore& core() const { return *group_->core_; }
  [[noreturn]] void invalid(const char* op, const std::string& what) const { core().invalid(op, what); }
  void checkRegistered(const char* op) const;
  void checkPeer(const char* op, int64_t rank) const;
  // Every rank's `mine`, by rank, through the group's own allgather.
  std::vector<std::vector<uint8_t>> gather(const std::vector<uint8_t>& mine);
  // Issues a put or signal (`tensor` undefined) or a wait for a signal, as a point-to-point work.
  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType type, const char* op, const at::Tensor& tensor, int64_t peer,
                                       std::chrono::milliseconds timeout, bool asyncOp,
                                       const ProcessGroupHier::PostTransfer& post);
  // Waits for this rank's puts and signals in flight (their own deadlines bound it).
  void awaitWrites();

  // Every rank's `failed` (empty: none), raised on every rank alike when any rank has one, naming it.
  void agree(const char* op, const std::string& failed);

  c10::intrusive_ptr<ProcessGroupHier> group_;
  // The group's core and transport when the tensor was registered: the window's communicator lives in
  // the transport, and a reconfigured group (another core) no longer reaches the window's peers.
  const GroupCore* registeredCore_ = nullptr;
  std::shared_ptr<transport::Group> transport_;
  at::Tensor tensor_;  // the registered tensor (owning) or a view of its memory; goes after window_
  std::unique_ptr<transport::Window> window_;  // null while no tensor is registered
  std::vector<at::ScalarType> dtypes_;         // every rank's, by rank
  std::vector<int64_t> numels_;
  std::mutex writesMutex_;
  std::vector<c10::intrusive_ptr<c10d::Work>> writes_;  // puts and signals not yet seen complete
};

}  // namespace hier

#endif  // HIER_TORCH_HAS_WINDOW
