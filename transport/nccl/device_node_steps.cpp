#include "transport/nccl/device_node_steps.h"

#include <algorithm>
#include <string>

#include "transport/base/error.h"

namespace hier::transport::nccl {
namespace {

void checkCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(ErrorKind::Internal, std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

// Parts of one size, each right after the one before: one buffer NCCL's own collectives can take.
bool equalAndConsecutive(const std::vector<Buffer>& parts) {
  for (size_t p = 1; p < parts.size(); ++p) {
    if (parts[p].count != parts[0].count || parts[p].data != parts[0].bytePtr() + p * parts[0].bytes()) return false;
  }
  return true;
}

}  // namespace

DeviceNodeSteps::DeviceNodeSteps(Communicator& node, cudaStream_t stream, Allocate allocate, const Deadline& deadline,
                                 bool direct)
    : node_(node), stream_(stream), allocate_(std::move(allocate)), deadline_(deadline), direct_(direct) {
  checkCuda(cudaSetDevice(node.device()), "cudaSetDevice");
}

DeviceNodeSteps::~DeviceNodeSteps() {
  // An event still pending on the stream is released once it completes.
  for (auto& event : copiedOut_) {
    if (event != nullptr) cudaEventDestroy(event);
  }
}

void DeviceNodeSteps::reduceScatter(const std::vector<Buffer>& inputs, const Buffer& output, const Reduction& how) {
  if (equalAndConsecutive(inputs)) {
    node_.reduceScatter(inputs.front().data, output.data, output.count, output.dtype, how, stream_, deadline_);
    return;
  }
  node_.grouped(
      [&] {
        for (size_t p = 0; p < inputs.size(); ++p) {
          if (inputs[p].count == 0) continue;  // every rank skips alike: the counts are the same everywhere
          // The output matters on the part's owner only; NCCL writes nothing on the other ranks.
          node_.reduce(inputs[p].data, output.data, inputs[p].count, inputs[p].dtype, how, int(p), stream_, deadline_);
        }
      },
      deadline_);
}

void DeviceNodeSteps::allgather(const std::vector<Buffer>& parts) {
  const Buffer& mine = parts[size_t(rank())];
  if (equalAndConsecutive(parts)) {
    node_.allGather(mine.data, parts.front().data, mine.count, mine.dtype, stream_, deadline_);
    return;
  }
  node_.grouped(
      [&] {
        for (size_t p = 0; p < parts.size(); ++p) {
          if (parts[p].count == 0) continue;
          node_.broadcast(parts[p].data, parts[p].data, parts[p].count, parts[p].dtype, int(p), stream_, deadline_);
        }
      },
      deadline_);
}

void DeviceNodeSteps::reduce(const Buffer& input, const Buffer& output, const Reduction& how, int root) {
  node_.reduce(input.data, output.data, input.count, input.dtype, how, root, stream_, deadline_);
}

void DeviceNodeSteps::broadcast(const Buffer& data, int root) {
  node_.broadcast(data.data, data.data, data.count, data.dtype, root, stream_, deadline_);
}

Buffer DeviceNodeSteps::scratch(size_t count, DataType dtype) {
  if (scratch_.data == nullptr) {
    scratch_ = Buffer{allocate_(std::max<size_t>(count * elementSize(dtype), 1), MemoryType::Cuda), count, dtype,
                      MemoryType::Cuda};
  }
  if (scratch_.count != count || scratch_.dtype != dtype) {
    throw Error(ErrorKind::Internal, "a schedule's passes asked for different scratch");
  }
  return scratch_;
}

void DeviceNodeSteps::reserveSlots(size_t slotBytes) {
  slotBytes = std::max<size_t>(slotBytes, 1);
  if (slots_ != nullptr) {
    if (slotBytes != slotBytes_) throw Error(ErrorKind::Internal, "a schedule's passes reserved different slots");
    return;
  }
  slotBytes_ = slotBytes;
  slots_ = static_cast<char*>(allocate_(2 * slotBytes_, MemoryType::Host));
}

Buffer DeviceNodeSteps::hostView(size_t fragment, const Buffer& piece, size_t offset) {
  if (offset + piece.bytes() > slotBytes_) {
    throw Error(ErrorKind::Internal, "a schedule staged " + std::to_string(offset + piece.bytes()) +
                                         " bytes in a slot of " + std::to_string(slotBytes_));
  }
  return Buffer{slots_ + (fragment % 2) * slotBytes_ + offset, piece.count, piece.dtype, MemoryType::Host};
}

Buffer DeviceNodeSteps::networkView(size_t fragment, const Buffer& piece, size_t offset) {
  return direct_ ? piece : hostView(fragment, piece, offset);
}

void DeviceNodeSteps::copyOut(const Buffer& piece, const Buffer& host) {
  if (piece.bytes() == 0 || host.data == piece.data) return;
  const bool onDevice = host.memory != MemoryType::Host;
  checkCuda(cudaMemcpyAsync(host.data, piece.data, piece.bytes(),
                            onDevice ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost, stream_),
            onDevice ? "cudaMemcpyAsync within the device" : "cudaMemcpyAsync to pinned memory");
}

void DeviceNodeSteps::copyIn(const Buffer& host, const Buffer& piece) {
  if (piece.bytes() == 0 || host.data == piece.data) return;
  const bool onDevice = host.memory != MemoryType::Host;
  checkCuda(cudaMemcpyAsync(piece.data, host.data, piece.bytes(),
                            onDevice ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, stream_),
            onDevice ? "cudaMemcpyAsync within the device" : "cudaMemcpyAsync from pinned memory");
}

void DeviceNodeSteps::staged(size_t fragment) {
  if (copiedOut_.size() <= fragment) copiedOut_.resize(fragment + 1, nullptr);
  cudaEvent_t& event = copiedOut_[fragment];
  if (event == nullptr) checkCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  checkCuda(cudaEventRecord(event, stream_), "cudaEventRecord");
}

void DeviceNodeSteps::awaitStaged(size_t fragment) {
  if (fragment >= copiedOut_.size() || copiedOut_[fragment] == nullptr) {
    throw Error(ErrorKind::Internal, "fragment " + std::to_string(fragment) + " was never staged");
  }
  // On the network thread: waitFor makes the node's device current there first.
  node_.waitFor(copiedOut_[fragment], deadline_);
}

void DeviceNodeSteps::gate(size_t fragment) {
  if (!gate_)
    gate_ = std::make_unique<StreamGate>(static_cast<uint32_t*>(allocate_(sizeof(uint32_t), MemoryType::Host)));
  gate_->wait(stream_, uint32_t(fragment + 1));
}

void DeviceNodeSteps::open(size_t fragment) {
  if (gate_) gate_->open(uint32_t(fragment + 1));
}

void DeviceNodeSteps::openAll() {
  if (gate_) gate_->openAll();
}

}  // namespace hier::transport::nccl
