// Point-to-point on CUDA tensors: through pinned host memory and UCX (transport/point_to_point.h), on
// threads of the CUDA path's own, never the group's executor, so that a send waiting for its receiver
// does not hold up the group's collectives (nor the other way round).
//
//   send   the tensor is copied to pinned memory on the point-to-point stream, after what the caller's
//          stream has enqueued; the sends thread posts the message once the copy landed, in issue order
//          (messages between two ranks with one tag match in the order they were posted). The work's
//          end is the copy (the tensor may be reused after it: device semantics); it is over when the
//          message left.
//   recv   the receive is posted at once into pinned memory (nothing is copied in: a receive reads
//          nothing); when the message came, the receives thread copies it into the tensor on the
//          point-to-point stream, after what the caller's stream had enqueued when it called. wait()
//          before then waits on the host, within the deadline.
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>

#include "plugin/cuda/cuda_path.hpp"
#include "plugin/work.hpp"
#include "transport/base/poll.h"
#include "transport/group/point_to_point.h"

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

CudaPath::PointToPoint CudaPath::startPointToPoint(c10d::OpType type, const at::Tensor& tensor, int peer, int tag) {
  const bool sending = type == c10d::OpType::SEND;
  const char* op = sending ? "send" : "recv";
  core_.checkUsable(op);
  const uint64_t sequence = core_.nextPointToPoint();
  const c10::Device where = tensor.device();
  c10::cuda::CUDAGuard guard(where);
  auto current = c10::cuda::getCurrentCUDAStream(where.index());
  if (capturing(current)) core_.invalid(op, "cannot be captured in a CUDA graph: it goes through host memory");
  const std::string other = peer < 0 ? "any rank" : "rank " + std::to_string(peer);
  const std::string description = core_.label(op, sequence) + (sending ? " to " : " from ") + other + ", tag " +
                                  std::to_string(tag) + " (point-to-point)";
  const std::vector<at::Tensor> none, one{tensor};
  auto work = profiled(describe_, sequence, op, one, one, [&](bool profiling) {
    return c10::make_intrusive<CudaWork>(core_.rank(), type, sequence, description,
                                         profiling ? profilingTitle(op) : nullptr, sending ? one : none,
                                         sending ? none : one, where, false,
                                         core_.addRow(sequence, true, op, sending ? one : none, sending ? none : one,
                                                      peer < 0 ? "any" : "peer " + std::to_string(peer)));
  });
  work->setAbortHandler([self = weak_from_this()] {
    if (auto path = self.lock()) path->abort("a point-to-point operation was aborted");
  });
  return PointToPoint{work, where, current, device(where).p2p, core_.timeoutOf(c10d::kUnsetTimeout), description};
}

CudaPath::Work CudaPath::send(const at::Tensor& tensor, int peer, int tag) {
  PointToPoint call = startPointToPoint(c10d::OpType::SEND, tensor, peer, tag);
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
          // The group's core outlives every transfer: its transport settles them all when it closes.
          message.onSettled = [core = &core_, call](const transport::TransferOutcome& outcome) {
            core->complete([call, outcome] {
              if (!outcome.succeeded) call.work->failed(transferError(call.description, outcome));
              call.work->finished();
            });
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

CudaPath::Work CudaPath::recv(const at::Tensor& tensor, int peer, int tag) {
  PointToPoint call = startPointToPoint(peer < 0 ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV, tensor, peer, tag);
  c10::cuda::CUDAGuard guard(call.where);
  // The copy into the tensor comes after what the caller's stream enqueued before this call.
  auto ready = std::make_shared<c10::cuda::CUDAEvent>();
  ready->record(call.current);
  at::Tensor pinned = pinnedLike(tensor);
  transport::PointToPoint message = messageOf(pinned, peer, tag, call.timeout);
  message.onSettled = [self = weak_from_this(), call, ready, pinned,
                       tensor](const transport::TransferOutcome& outcome) {
    auto path = self.lock();
    if (!path) {  // the group is gone: so is what the message was for
      call.work->failed(transferError(call.description, outcome));
      call.work->finished();
      return;
    }
    path->receives_.submit(
        [path, call, ready, pinned, tensor, outcome] {
          if (!outcome.succeeded) {
            call.work->failed(transferError(call.description, outcome));
            call.work->finished();
            return;
          }
          try {
            c10::cuda::CUDAGuard onDevice(call.where);
            ready->block(call.p2p);
            path->startTimer(*call.work, call.p2p);
            {
              c10::cuda::CUDAStreamGuard onStream(call.p2p);
              tensor.copy_(pinned, /*non_blocking=*/true);
            }
            call.work->setSourceRank(outcome.source);
            call.work->enqueued(call.p2p);
            path->watch(call.p2p, call.work, "recv", call.timeout,
                        std::make_shared<const std::vector<at::Tensor>>(std::vector<at::Tensor>{tensor, pinned}));
          } catch (const std::exception& error) {
            call.work->failed(failure(call.description, error));
            call.work->finished();
          }
        },
        /*mayRunHere=*/false);
  };
  try {
    transport::receive(core_.transport()->communicator(), message);
  } catch (const transport::Error& error) {
    call.work->failed(failure(call.description, error));
    call.work->finished();
  }
  return call.work;
}

}  // namespace hier
