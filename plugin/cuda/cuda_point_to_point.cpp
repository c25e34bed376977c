// Point-to-point on CUDA tensors: through pinned host memory and UCX (transport/point_to_point.h), never
// the group's executor, so that a send waiting for its receiver does not hold up the group's
// collectives (nor the other way round). Both calls enqueue all their device steps and return.
//
//   send   the tensor is copied to pinned memory on the point-to-point stream, after what the caller's
//          stream has enqueued; the sends thread posts the message once the copy landed, in issue order
//          (messages between two ranks with one tag match in the order they were posted). The work's
//          end is the copy (the tensor may be reused after it: device semantics); it is over when the
//          message left.
//   recv   the receive is posted at once into pinned memory; the copy into the tensor is enqueued on the
//          stream of receives from that peer, after what the caller's stream had enqueued, behind a gate
//          (transport/nccl/stream_gate.h) that the message's arrival opens, or its failure.
//   batch  inside batch_isend_irecv, on a group of one host, sends and receives with a named peer are
//          kept until the batch ends, then enqueued as one NCCL group on the group's communicator, on
//          the point-to-point stream (CudaPath::send).
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>

#include "plugin/cuda/completions.hpp"
#include "plugin/cuda/cuda_path.hpp"
#include "plugin/cuda/cuda_plan.hpp"
#include "plugin/work.hpp"
#include "transport/base/poll.h"
#include "transport/group/point_to_point.h"
#include "transport/nccl/stream_gate.h"

namespace hier {
namespace {

at::Tensor pinnedLike(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
}

std::exception_ptr transferError(const std::string& description, const transport::TransferOutcome& outcome) {
  const std::string why = outcome.kind == transport::ErrorKind::Timeout
                              ? "no matching message within the deadline"
                              : std::string(transport::toString(outcome.kind)) + ": " + outcome.message;
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, uint32_t(__LINE__)}, description + ": " + why));
}

bool capturing(const c10::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

// The message that carries `pinned` (its memory held until UCX lets go of it).
transport::PointToPoint messageOf(const at::Tensor& pinned, int peer, int tag, std::chrono::milliseconds timeout) {
  transport::PointToPoint message;
  message.peer = peer;
  message.tag = uint32_t(tag);
  message.data = pinned.data_ptr();
  message.bytes = size_t(pinned.numel()) * pinned.element_size();
  message.deadline = transport::Deadline::after(timeout);
  message.keepalive = std::make_shared<const at::Tensor>(pinned);
  return message;
}

std::exception_ptr failure(const std::string& description, const std::exception& error) {
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, uint32_t(__LINE__)}, description + ": " + error.what()));
}

}  // namespace

CudaPath::PointToPoint CudaPath::startPointToPoint(c10d::OpType type, const at::Tensor& tensor, int peer, int tag,
                                                   bool throughHost) {
  const bool sending = type == c10d::OpType::SEND;
  const char* op = sending ? "send" : "recv";
  core_.checkUsable(op);
  const c10::Device where = tensor.device();
  c10::cuda::CUDAGuard guard(where);
  auto current = c10::cuda::getCurrentCUDAStream(where.index());
  if (throughHost && capturing(current)) {
    core_.invalid(op,
                  "cannot be captured in a CUDA graph: it goes through host memory (batch_isend_irecv on a group "
                  "of one host can be)");
  }
  const uint64_t sequence = core_.nextPointToPoint();
  const std::string other = peer < 0 ? "any rank" : "rank " + std::to_string(peer);
  const std::string description = core_.label(op, sequence) + (sending ? " to " : " from ") + other + ", tag " +
                                  std::to_string(tag) + " (point-to-point)";
  const std::vector<at::Tensor> none, one{tensor};
  auto work = profiled(describe_, sequence, op, one, one, [&](bool profiling) {
    return c10::make_intrusive<CudaWork>(
        core_.rank(), type, sequence, description, profiling ? profilingTitle(op) : nullptr, sending ? one : none,
        sending ? none : one, where, false,
        core_.addRow(type, sequence, true, op, sending ? one : none, sending ? none : one,
                     peer < 0 ? "any" : "peer " + std::to_string(peer)));
  });
  work->setAbortHandler([self = weak_from_this()] {
    if (auto path = self.lock()) path->abort("a point-to-point operation was aborted");
  });
  return PointToPoint{work,
                      where,
                      current,
                      device(where).p2p,
                      core_.operationTimeout(c10d::kUnsetTimeout, /*pointToPoint=*/true, sequence),
                      description};
}

c10::intrusive_ptr<CudaWork> CudaPath::batched(c10d::OpType type, const at::Tensor& tensor, int peer, int tag,
                                               bool batching) {
  if (!batching || peer < 0 || topology().nodeCount() != 1) return {};
  PointToPoint call = startPointToPoint(type, tensor, peer, tag, /*throughHost=*/false);
  auto work = call.work;
  std::lock_guard<std::mutex> lock(batchMutex_);
  batch_.push_back(Batched{std::move(call), tensor, peer});
  return work;
}

void CudaPath::endBatch() {
  std::vector<Batched> ops;
  {
    std::lock_guard<std::mutex> lock(batchMutex_);
    ops.swap(batch_);
  }
  if (ops.empty()) return;
  const c10::Device where = ops.front().call.where;
  c10::cuda::CUDAGuard guard(where);
  // NCCL takes contiguous memory: a tensor that is not gets a copy (sent), or a buffer copied back
  // (received), made on the current stream before the batch's stream waits for it.
  std::vector<at::Tensor> buffers;
  std::vector<std::pair<at::Tensor, at::Tensor>> copiedBack;
  for (const auto& op : ops) {
    const bool sending = op.call.work->retrieveOpType() == c10d::OpType::SEND;
    if (op.tensor.is_contiguous()) {
      buffers.push_back(op.tensor);
    } else if (sending) {
      buffers.push_back(op.tensor.contiguous());
    } else {
      buffers.push_back(at::empty_like(op.tensor, at::MemoryFormat::Contiguous));
      copiedBack.emplace_back(buffers.back(), op.tensor);
    }
  }
  auto current = c10::cuda::getCurrentCUDAStream(where.index());
  const bool captured = capturing(current);
  // The point-to-point stream, after what the current one holds; under a capture, the capturing stream.
  auto stream = captured ? current : device(where).p2p;
  if (!captured) {
    c10::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(stream);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    c10::cuda::CUDACachingAllocator::recordStream(buffers[i].storage().data_ptr(), stream);
    if (!captured) startTimer(*ops[i].call.work, stream);
  }
  const std::chrono::milliseconds timeout = ops.front().call.timeout;
  const transport::Deadline deadline = transport::Deadline::after(timeout);
  try {
    transport::nccl::Communicator& comm = communicator(where, timeout);
    comm.grouped(
        [&] {
          for (size_t i = 0; i < ops.size(); ++i) {
            const size_t bytes = size_t(buffers[i].numel()) * buffers[i].element_size();
            if (bytes == 0) continue;
            if (ops[i].call.work->retrieveOpType() == c10d::OpType::SEND) {
              comm.send(buffers[i].data_ptr(), bytes, ops[i].peer, stream.stream(), deadline);
            } else {
              comm.recv(buffers[i].data_ptr(), bytes, ops[i].peer, stream.stream(), deadline);
            }
          }
        },
        deadline);
    {
      c10::cuda::CUDAStreamGuard onStream(stream);
      for (const auto& [written, tensor] : copiedBack) tensor.copy_(written, /*non_blocking=*/true);
    }
    for (auto& op : ops) op.call.work->enqueued(stream);
  } catch (const transport::Error& error) {
    const std::exception_ptr failed =
        failure(ops.front().call.description + " (in a batch of " + std::to_string(ops.size()) + ")", error);
    if (cuda_plan::failsGroup(error.kind(), ncclAborted())) {
      core_.markFailed("batch_isend_irecv: " + std::string(error.what()));
      watchdog_->failAll(failed);
      abortNccl();
    }
    for (auto& op : ops) op.call.work->failed(failed);
  } catch (const std::exception& local) {
    abort(std::string("batch_isend_irecv failed part-way: ") + local.what());
    for (auto& op : ops) op.call.work->failed(std::current_exception());
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (captured) {
      ops[i].call.work->finished();
      continue;
    }
    watch(stream, ops[i].call.work, ops[i].call.work->retrieveOpType() == c10d::OpType::SEND ? "send" : "recv", timeout,
          std::make_shared<const std::vector<at::Tensor>>(std::vector<at::Tensor>{ops[i].tensor, buffers[i]}));
  }
}

CudaPath::Work CudaPath::send(const at::Tensor& tensor, int peer, int tag, bool batching) {
  if (auto work = batched(c10d::OpType::SEND, tensor, peer, tag, batching)) return work;
  PointToPoint call = startPointToPoint(c10d::OpType::SEND, tensor, peer, tag, /*throughHost=*/true);
  c10::cuda::CUDAGuard guard(call.where);
  at::Tensor pinned = pinnedLike(tensor);
  {
    c10::cuda::CUDAEvent ready;
    ready.record(call.current);
    ready.block(call.p2p);
    startTimer(*call.work, call.p2p);
    c10::cuda::CUDAStreamGuard onStream(call.p2p);
    pinned.copy_(tensor, /*non_blocking=*/true);
  }
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), call.p2p);
  auto copied = std::make_shared<c10::cuda::CUDAEvent>(cudaEventDisableTiming | cudaEventBlockingSync);
  copied->record(call.p2p);
  call.work->enqueued(call.p2p);

  sends_.submit(
      [this, call, copied, pinned, peer, tag] {
        try {
          c10::cuda::CUDAGuard onDevice(call.where);
          c10::cuda::CUDAStreamCaptureModeGuard quietly(cudaStreamCaptureModeThreadLocal);
          transport::pollUntil([&] { return copied->query(); }, transport::Deadline::after(call.timeout),
                               [this] { return givingUp(); }, "the copy of its tensor to host memory");
          transport::PointToPoint message = messageOf(pinned, peer, tag, call.timeout);
          // UCX may settle the transfer as the group closes: the callback holds the completion thread only.
          message.onSettled = [completions = core_.completions(), call](const transport::TransferOutcome& outcome) {
            completions->submit(
                [call, outcome] {
                  if (!outcome.succeeded) call.work->failed(transferError(call.description, outcome));
                  call.work->finished();
                },
                /*mayRunHere=*/false);
          };
          transport::send(core_.transport()->communicator(), message);
        } catch (const std::exception& error) {
          call.work->failed(failure(call.description, error));
          call.work->finished();
        }
      },
      /*mayRunHere=*/false);
  return call.work;
}

CudaPath::Work CudaPath::recv(const at::Tensor& tensor, int peer, int tag, bool batching) {
  if (auto work = batched(c10d::OpType::RECV, tensor, peer, tag, batching)) return work;
  PointToPoint call =
      startPointToPoint(peer < 0 ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV, tensor, peer, tag, true);
  c10::cuda::CUDAGuard guard(call.where);
  call.p2p = receiveStream(call.where, peer);
  at::Tensor pinned = pinnedLike(tensor);
  at::Tensor counter = at::zeros({1}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  auto gate = std::make_shared<transport::nccl::StreamGate>(static_cast<uint32_t*>(counter.data_ptr()));
  {
    // The copy in comes after what the caller's stream enqueued before this call, and after the message.
    c10::cuda::CUDAEvent ready;
    ready.record(call.current);
    ready.block(call.p2p);
    startTimer(*call.work, call.p2p);
    try {
      gate->wait(call.p2p.stream(), 1);
    } catch (const transport::Error& error) {
      C10_THROW_ERROR(DistBackendError, call.description + ": " + error.what());
    }
    c10::cuda::CUDAStreamGuard onStream(call.p2p);
    tensor.copy_(pinned, /*non_blocking=*/true);
  }
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), call.p2p);
  call.work->enqueued(call.p2p);
  auto end = endOf(call.p2p);
  // What the device reads or writes until it passed `end`. The message's end hands it over: to the
  // watchdog, or, the group closing or gone, to a completion thread that waits for the device.
  auto settle = [self = weak_from_this(), call, gate, end,
                 holds = std::make_shared<const std::vector<at::Tensor>>(
                     std::vector<at::Tensor>{tensor, pinned, counter})](std::exception_ptr error) {
    if (error) call.work->failed(error);
    gate->openAll();
    auto path = self.lock();
    if (path && !path->stopping_.load()) return path->watch(end, call.work, "recv", call.timeout, holds);
    Completions::process().run([end, holds, work = call.work, where = call.where] {
      c10::cuda::CUDAGuard onDevice(where);
      c10::cuda::CUDAStreamCaptureModeGuard quietly(cudaStreamCaptureModeThreadLocal);
      end->synchronize();
      work->finished();
    });
  };
  transport::PointToPoint message = messageOf(pinned, peer, tag, call.timeout);
  // On UCX's thread: nothing here may wait.
  message.onSettled = [call, settle](const transport::TransferOutcome& outcome) {
    if (outcome.succeeded) call.work->setSourceRank(outcome.source);
    settle(outcome.succeeded ? nullptr : transferError(call.description, outcome));
  };
  try {
    transport::receive(core_.transport()->communicator(), message);
  } catch (const transport::Error& error) {
    settle(failure(call.description, error));
  }
  return call.work;
}

}  // namespace hier
