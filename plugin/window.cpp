#include "plugin/window.hpp"

#if HIER_TORCH_HAS_WINDOW

#include <algorithm>
#include <cstring>

#include "transport/base/error.h"
#include "transport/base/tag.h"

namespace hier {
namespace {

// A rank's part of a registration, as the others get it: whether it can take part, then its tensor's
// dtype and length and its window's descriptor, or why it cannot.
struct Entry {
  bool ok = false;
  at::ScalarType dtype = at::kByte;
  int64_t numel = 0;
  std::vector<uint8_t> descriptor;  // or, where !ok, the reason's text
};

constexpr size_t kEntryHeader = 1 + 1 + sizeof(int64_t);

std::vector<uint8_t> encode(const Entry& entry) {
  std::vector<uint8_t> bytes(kEntryHeader + entry.descriptor.size());
  bytes[0] = entry.ok ? 1 : 0;
  bytes[1] = uint8_t(entry.dtype);
  std::memcpy(bytes.data() + 2, &entry.numel, sizeof entry.numel);
  std::copy(entry.descriptor.begin(), entry.descriptor.end(), bytes.begin() + kEntryHeader);
  return bytes;
}

Entry decode(const std::vector<uint8_t>& bytes) {
  Entry entry;
  if (bytes.size() < kEntryHeader) return entry;  // not ok, no reason: reported as malformed
  entry.ok = bytes[0] == 1;
  entry.dtype = at::ScalarType(bytes[1]);
  std::memcpy(&entry.numel, bytes.data() + 2, sizeof entry.numel);
  entry.descriptor.assign(bytes.begin() + kEntryHeader, bytes.end());
  return entry;
}

}  // namespace

WindowHier::WindowHier(c10::intrusive_ptr<ProcessGroupHier> group) : group_(std::move(group)) {}

WindowHier::~WindowHier() {
  try {
    awaitWrites();
  } catch (...) {
    // A destructor reports nothing: the failed writes' works carry their errors.
  }
  if (!window_) return;
  // No barrier here (ranks drop their windows when their garbage collectors say): peers may still put
  // into this memory, so it stays registered, and held, until the group closes.
  struct Left {  // goes bottom up: the registration, the memory, the transport
    std::shared_ptr<transport::Group> transport;
    at::Tensor tensor;
    std::unique_ptr<transport::Window> window;
  };
  auto left = std::make_shared<Left>(Left{transport_, tensor_, std::move(window_)});
  std::lock_guard<std::mutex> lock(group_->windowsLeftMutex_);
  group_->windowsLeft_.push_back(std::move(left));
}

void WindowHier::checkRegistered(const char* op) const {
  if (!window_) invalid(op, "no tensor is registered with this window; call tensor_register(tensor) first");
  if (group_->core_.get() != registeredCore_) {
    invalid(op, "the group was reconfigured after this window registered its tensor; make a new window");
  }
}

void WindowHier::agree(const char* op, const std::string& failed) {
  const std::vector<uint8_t> mine(failed.begin(), failed.end());
  const auto all = gather(mine);
  for (size_t rank = 0; rank < all.size(); ++rank) {
    if (all[rank].empty()) continue;
    const std::string why(all[rank].begin(), all[rank].end());
    C10_THROW_ERROR(DistBackendError,
                    core().label(op) + ": " +
                        (int(rank) == group_->getRank() ? "this rank" : "rank " + std::to_string(rank)) +
                        " could not reach its peers' windows (" + why + "); no rank registered its tensor");
  }
}

void WindowHier::checkPeer(const char* op, int64_t rank) const {
  const int size = group_->getSize();
  if (rank < 0 || rank >= size) {
    invalid(op, "rank " + std::to_string(rank) + " is outside the group's ranks 0.." + std::to_string(size - 1));
  }
}

std::vector<std::vector<uint8_t>> WindowHier::gather(const std::vector<uint8_t>& mine) {
  const int size = group_->getSize();
  c10d::AllgatherOptions opts;
  auto length = at::full({1}, int64_t(mine.size()), at::kLong);
  auto lengths = at::empty({size}, at::kLong);
  group_->_allgather_base(lengths, length, opts)->wait();
  const int64_t longest = lengths.max().item<int64_t>();
  auto padded = at::zeros({longest}, at::kByte);
  std::memcpy(padded.data_ptr(), mine.data(), mine.size());
  auto all = at::empty({size * longest}, at::kByte);
  group_->_allgather_base(all, padded, opts)->wait();
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(size));
  const auto* bytes = all.const_data_ptr<uint8_t>();
  for (int rank = 0; rank < size; ++rank) {
    const auto* begin = bytes + rank * longest;
    out[size_t(rank)].assign(begin, begin + lengths[rank].item<int64_t>());
  }
  return out;
}

void WindowHier::tensor_register(const at::Tensor& tensor, bool owning) {
  static constexpr const char* op = "tensor_register";
  core().checkUsable(op);
  // What this rank cannot register travels to the others instead of its window, so that every rank
  // raises alike instead of some waiting for the others' windows.
  Entry entry;
  std::string problem;
  if (!tensor.defined()) {
    problem = "the tensor is undefined";
  } else if (!tensor.device().is_cpu()) {
    problem = "the tensor is on " + tensor.device().str() +
              "; hier's windows take CPU tensors (CUDA windows are not implemented: use NCCL's for those)";
  } else if (tensor.layout() != at::kStrided || !tensor.is_contiguous()) {
    problem = "the tensor is not dense and contiguous; register tensor.contiguous() and read it back from there";
  } else if (window_) {
    problem = "a tensor is registered already; call tensor_deregister() first";
  }
  std::unique_ptr<transport::Window> window;
  std::shared_ptr<transport::Group> transport;
  // Every rank registers in the same order. The count wraps at the tag's slot width: a signal would have to
  // outlive 8 million registrations of the group to meet a later one's.
  const uint32_t number = group_->windows_++ % (transport::kMaxUserTag + 1);
  if (problem.empty()) {
    try {
      transport = core().transport();
      window = std::make_unique<transport::Window>(transport->communicator(), number, tensor.data_ptr(),
                                                   size_t(tensor.numel()) * tensor.element_size());
      entry = {true, tensor.scalar_type(), tensor.numel(), window->descriptor()};
    } catch (const transport::Error& error) {
      problem = error.what();
    }
  }
  if (!problem.empty()) entry.descriptor.assign(problem.begin(), problem.end());

  std::vector<Entry> entries;
  for (const auto& bytes : gather(encode(entry))) entries.push_back(decode(bytes));
  for (size_t rank = 0; rank < entries.size(); ++rank) {
    if (entries[rank].ok) continue;
    const std::string why(entries[rank].descriptor.begin(), entries[rank].descriptor.end());
    invalid(op, (int(rank) == group_->getRank() ? "this rank: " : "rank " + std::to_string(rank) + ": ") +
                    (why.empty() ? "its part was malformed (a different hier build?)" : why) +
                    "; no rank registered its tensor");
  }
  std::vector<std::vector<uint8_t>> descriptors;
  for (auto& e : entries) descriptors.push_back(std::move(e.descriptor));
  std::string unreachable;
  try {
    window->connect(descriptors, transport::Deadline::after(core().timeoutOf(c10d::kUnsetTimeout)));
  } catch (const transport::Error& error) {
    unreachable = error.what();
  }
  agree(op, unreachable);
  dtypes_.clear();
  numels_.clear();
  for (const auto& e : entries) {
    dtypes_.push_back(e.dtype);
    numels_.push_back(e.numel);
  }
  // Not owning: a view of the memory, which the caller keeps alive.
  tensor_ = owning ? tensor : at::from_blob(tensor.data_ptr(), tensor.sizes(), tensor.options());
  registeredCore_ = group_->core_.get();
  transport_ = std::move(transport);
  window_ = std::move(window);
}

void WindowHier::tensor_deregister() {
  static constexpr const char* op = "tensor_deregister";
  checkRegistered(op);
  // Every rank's writes land before any rank lets its memory go.
  awaitWrites();
  group_->barrier()->wait();
  window_.reset();
  transport_.reset();
  tensor_ = at::Tensor();
  dtypes_.clear();
  numels_.clear();
}

void WindowHier::awaitWrites() {
  std::vector<c10::intrusive_ptr<c10d::Work>> writes;
  {
    std::lock_guard<std::mutex> lock(writesMutex_);
    writes.swap(writes_);
  }
  for (auto& work : writes) {
    try {
      work->wait();
    } catch (...) {
      // Its caller sees the error on the work; here it only had to end.
    }
  }
}

c10::intrusive_ptr<c10d::Work> WindowHier::issue(c10d::OpType type, const char* op, const at::Tensor& tensor,
                                                 int64_t peer, std::chrono::milliseconds timeout, bool asyncOp,
                                                 const ProcessGroupHier::PostTransfer& post) {
  core().checkUsable(op);
  OperationName name = core().operationName(op, core().nextPointToPoint());
  name.pointToPoint = true;
  name.peer = int(peer);
  std::vector<at::Tensor> inputs;
  if (tensor.defined()) inputs.push_back(tensor);
  auto work = group_->postTransfer(type, std::move(name), std::move(inputs), {}, timeout, nullptr, post);
  if (type == c10d::OpType::SEND) {
    std::lock_guard<std::mutex> lock(writesMutex_);
    std::erase_if(writes_, [](const c10::intrusive_ptr<c10d::Work>& w) { return w->isCompleted(); });
    writes_.push_back(work);
  }
  // Synchronous on the CPU: the caller gets a completed work, and its error now.
  if (!asyncOp) work->wait();
  return work;
}

c10::intrusive_ptr<c10d::Work> WindowHier::put(const at::Tensor& tensor, int64_t dstRank, int64_t targetOffsetNelems,
                                               bool asyncOp, const c10d::PutOptions& opts) {
  static constexpr const char* op = "put";
  checkRegistered(op);
  checkPeer(op, dstRank);
  if (dstRank == group_->getRank()) {
    invalid(op, "a rank does not put into its own window; copy into map_remote_tensor(rank) instead");
  }
  if (!tensor.defined() || !tensor.device().is_cpu() || tensor.layout() != at::kStrided) {
    invalid(op, "the source must be a dense CPU tensor (hier's windows are on the CPU)");
  }
  const auto peer = size_t(dstRank);
  if (tensor.scalar_type() != dtypes_[peer]) {
    invalid(op, std::string("the source's dtype ") + c10::toString(tensor.scalar_type()) + " differs from rank " +
                    std::to_string(dstRank) + "'s window's, " + c10::toString(dtypes_[peer]));
  }
  if (targetOffsetNelems < 0 || targetOffsetNelems > numels_[peer] ||
      tensor.numel() > numels_[peer] - targetOffsetNelems) {
    invalid(op, std::to_string(tensor.numel()) + " elements at offset " + std::to_string(targetOffsetNelems) +
                    " do not fit in rank " + std::to_string(dstRank) + "'s window of " + std::to_string(numels_[peer]) +
                    " elements");
  }
  at::Tensor data = tensor.resolve_conj().resolve_neg().contiguous();  // the values, as they read
  const size_t elementBytes = data.element_size();
  return issue(c10d::OpType::SEND, op, data, dstRank, opts.timeout, asyncOp,
               [&](const transport::Deadline& deadline, std::shared_ptr<const void> keepalive,
                   std::function<void(const transport::TransferOutcome&)> onSettled) {
                 return window_->put(data.const_data_ptr(), size_t(data.numel()) * elementBytes, int(dstRank),
                                     size_t(targetOffsetNelems) * elementBytes, std::move(keepalive), deadline,
                                     std::move(onSettled));
               });
}

c10::intrusive_ptr<c10d::Work> WindowHier::signal(int64_t peerRank, bool asyncOp, const c10d::SignalOptions& opts) {
  static constexpr const char* op = "signal";
  checkRegistered(op);
  checkPeer(op, peerRank);
  if (peerRank == group_->getRank()) invalid(op, "a rank does not signal itself");
  return issue(c10d::OpType::SEND, op, at::Tensor(), peerRank, opts.timeout, asyncOp,
               [&](const transport::Deadline& deadline, std::shared_ptr<const void>,
                   std::function<void(const transport::TransferOutcome&)> onSettled) {
                 return window_->signal(int(peerRank), deadline, std::move(onSettled));
               });
}

c10::intrusive_ptr<c10d::Work> WindowHier::wait_signal(int64_t peerRank, bool asyncOp,
                                                       const c10d::WaitSignalOptions& opts) {
  static constexpr const char* op = "wait_signal";
  checkRegistered(op);
  checkPeer(op, peerRank);
  if (peerRank == group_->getRank()) invalid(op, "a rank does not wait for a signal from itself");
  return issue(c10d::OpType::RECV, op, at::Tensor(), peerRank, opts.timeout, asyncOp,
               [&](const transport::Deadline& deadline, std::shared_ptr<const void>,
                   std::function<void(const transport::TransferOutcome&)> onSettled) {
                 return window_->waitSignal(int(peerRank), deadline, std::move(onSettled));
               });
}

at::Tensor WindowHier::map_remote_tensor(int64_t rank) {
  static constexpr const char* op = "map_remote_tensor";
  checkRegistered(op);
  checkPeer(op, rank);
  if (rank != group_->getRank()) {
    invalid(op, "hier maps this rank's own window only (rank " + std::to_string(group_->getRank()) +
                    "); a peer's is reached through put() (get_attr reports SEPARATE)");
  }
  return tensor_;
}

c10d::WindowAttr WindowHier::get_attr(int64_t peerRank) {
  static constexpr const char* op = "get_attr";
  checkRegistered(op);
  checkPeer(op, peerRank);
  return c10d::WindowAttr{c10d::WindowAccessType::SEPARATE};
}

}  // namespace hier

#endif  // HIER_TORCH_HAS_WINDOW
