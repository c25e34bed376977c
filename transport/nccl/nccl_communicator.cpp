#include "transport/nccl/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "transport/reduce/reduce.h"

namespace hier::transport::nccl {
namespace {

void checkCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(ErrorKind::Internal, std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

// Whether this thread has a current CUDA context. A thread that never used CUDA reports device 0 from
// cudaGetDevice, and setting device 0 "back" on it would make a context there (half a GiB on every
// rank): the driver's cuCtxGetCurrent tells the two apart, reached through the runtime so that nothing
// links the driver library.
bool threadHasContext() {
  using CtxGetCurrent = int (*)(void**);  // CUresult cuCtxGetCurrent(CUcontext*)
  static CtxGetCurrent get = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<CtxGetCurrent>(fn);
  }();
  void* context = nullptr;
  return get == nullptr || (get(&context) == 0 && context != nullptr);  // unknown: assume it has one
}

// Makes the communicator's device current on this thread (NCCL calls need it) and, when the thread had
// a context before, makes its previous device current again at scope exit. Threads hier starts (a
// schedule's network thread, the watchdog) have none: they keep the communicator's device and never
// touch device 0.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ == device) return;
    restore_ = previous_ >= 0 && threadHasContext();
    cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (restore_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
  bool restore_ = false;
};

// While it lives, this thread's potentially unsafe CUDA calls (event queries, synchronisation) do not
// invalidate a CUDA graph another thread is capturing: only this thread's own captures forbid them.
class CaptureModeGuard {
 public:
  CaptureModeGuard() : mode_(cudaStreamCaptureModeThreadLocal) { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~CaptureModeGuard() { cudaThreadExchangeStreamCaptureMode(&mode_); }

 private:
  cudaStreamCaptureMode mode_;
};

// NCCL's asynchronous error, or the error of asking for it (which NCCL reports as the call's result).
ncclResult_t asyncErrorOf(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
  return asked != ncclSuccess ? asked : state;
}

// How a thread waits for NCCL or the device: polls back to back, yielding the core, for the first
// millisecond, then short sleeps, then 1 ms ones from 100 ms on. A collective on a non-blocking
// communicator hands its launch to a thread NCCL starts for it and reads ncclInProgress until that thread
// is done, some tens of microseconds, which sleeping would add to every call (docs/gpu.md). A core is
// never burnt for long: the yields end after a millisecond.
class Backoff {
 public:
  void pause() {
    const auto waited = std::chrono::steady_clock::now() - start_;
    if (waited < std::chrono::milliseconds(1))
      std::this_thread::yield();
    else if (waited < std::chrono::milliseconds(100))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

 private:
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Calls nest (a group holds a use while its calls take theirs); only the outermost one aborts on failure,
// since abort() waits for every use to end.
thread_local int tUseDepth = 0;

ncclDataType_t typeOf(DataType dtype) {
  auto type = dataType(dtype);
  if (!type) throw Error(ErrorKind::InvalidUsage, std::string("NCCL cannot move ") + toString(dtype) + " elements");
  return *type;
}

// The NCCL reduction of one call on a communicator of `ranks`: the fixed op, or for a scale (PREMUL_SUM)
// a temporary op whose factor travels as a host scalar of the buffer's own type, or stays in device
// memory (Reduction::deviceScale), destroyed with this object once the call that uses it is enqueued,
// as NCCL allows.
class ReductionOp {
 public:
  ReductionOp(ncclComm_t comm, int ranks, DataType dtype, const Reduction& how) : comm_(comm) {
    if ((how.scale || how.deviceScale) && ranks == 1 && !scalesOnOneRank(versionCode())) {
      throw Error(ErrorKind::Internal, "NCCL " + version() +
                                           " leaves elements of a one-rank PREMUL_SUM unscaled "
                                           "(NVIDIA/nccl#1950); the caller scales instead (Communicator::scales)");
    }
    if (how.deviceScale) {
      if (!scales(dtype)) {
        throw Error(ErrorKind::InvalidUsage, std::string("NCCL cannot scale ") + toString(dtype) + " elements");
      }
      ncclResult_t result =
          ncclRedOpCreatePreMulSum(&op_, const_cast<void*>(how.deviceScale), typeOf(dtype), ncclScalarDevice, comm);
      if (result != ncclSuccess) throw describeFailure(result, ncclGetLastError(comm), "ncclRedOpCreatePreMulSum");
      created_ = true;
      return;
    }
    if (!how.scale) {
      // One rank's average is its own value: a plain copy, not NCCL's one-rank kernel (see above).
      auto mapped = mapReduction(ranks == 1 && how.op == ReduceOp::Avg ? ReduceOp::Sum : how.op, dtype);
      if (!mapped.op) throw Error(ErrorKind::InvalidUsage, mapped.unsupported);
      op_ = *mapped.op;
      return;
    }
    const double factor = *how.scale;
    union {
      double f64;
      float f32;
      uint16_t f16;
    } scalar{};
    switch (dtype) {
      case DataType::Float64: scalar.f64 = factor; break;
      case DataType::Float32: scalar.f32 = float(factor); break;
      case DataType::Float16:
      case DataType::BFloat16: {
        const uint16_t one = dtype == DataType::Float16 ? 0x3C00 : 0x3F80;  // 1.0, rounded times the factor
        scale(&scalar.f16, &one, 1, dtype, factor);
        break;
      }
      default: throw Error(ErrorKind::InvalidUsage, std::string("NCCL cannot scale ") + toString(dtype) + " elements");
    }
    ncclResult_t result = ncclRedOpCreatePreMulSum(&op_, &scalar, typeOf(dtype), ncclScalarHostImmediate, comm);
    if (result != ncclSuccess) throw describeFailure(result, ncclGetLastError(comm), "ncclRedOpCreatePreMulSum");
    created_ = true;
  }
  ~ReductionOp() {
    if (created_) ncclRedOpDestroy(op_, comm_);
  }
  ReductionOp(const ReductionOp&) = delete;
  ReductionOp& operator=(const ReductionOp&) = delete;
  ncclRedOp_t op() const { return op_; }

 private:
  ncclComm_t comm_;
  ncclRedOp_t op_{};
  bool created_ = false;
};

}  // namespace

std::optional<ncclDataType_t> dataType(DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return ncclFloat32;
    case DataType::Float64: return ncclFloat64;
    case DataType::Float16: return ncclFloat16;
    case DataType::BFloat16: return ncclBfloat16;
    case DataType::Int8: return ncclInt8;
    case DataType::Int32: return ncclInt32;
    case DataType::Int64: return ncclInt64;
    case DataType::UInt8:
    case DataType::Bool: return ncclUint8;
    case DataType::Int16:
    case DataType::Complex64:
    case DataType::Complex128: return std::nullopt;
  }
  return std::nullopt;
}

ReductionMapping mapReduction(ReduceOp op, DataType dtype) {
  if (dtype == DataType::Bool) {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Max:
      case ReduceOp::BOr: return {ncclMax, {}};
      case ReduceOp::Product:
      case ReduceOp::Min:
      case ReduceOp::BAnd: return {ncclMin, {}};
      default: return {std::nullopt, std::string("NCCL cannot compute ") + toString(op) + " of bool tensors"};
    }
  }
  if (!dataType(dtype)) return {std::nullopt, std::string("NCCL cannot reduce ") + toString(dtype) + " elements"};
  switch (op) {
    case ReduceOp::Sum: return {ncclSum, {}};
    case ReduceOp::Avg: return {ncclAvg, {}};
    case ReduceOp::Product: return {ncclProd, {}};
    case ReduceOp::Min: return {ncclMin, {}};
    case ReduceOp::Max: return {ncclMax, {}};
    default:
      return {std::nullopt, std::string("NCCL has no bitwise reductions (") + toString(op) +
                                "); reduce this tensor on the CPU, or use SUM, PRODUCT, MIN, MAX or AVG"};
  }
}

bool scales(DataType dtype) {
  return dtype == DataType::Float32 || dtype == DataType::Float64 || dtype == DataType::Float16 ||
         dtype == DataType::BFloat16;
}

bool scalesOnOneRank(int version) { return version >= 22907; }

bool scalesOn(DataType dtype, int ranks, int version) {
  return scales(dtype) && (ranks > 1 || scalesOnOneRank(version));
}

int versionCode() {
  static const int code = [] {
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : 0;
  }();
  return code;
}

Error describeFailure(ncclResult_t result, const std::string& lastError, const std::string& what) {
  std::string text = what + ": " + ncclGetErrorString(result) + (lastError.empty() ? "" : " (" + lastError + ")");
  switch (result) {
    case ncclInvalidUsage:
    case ncclInvalidArgument:
      if (lastError.find("Duplicate GPU") != std::string::npos) {
        return Error(ErrorKind::InvalidUsage,
                     text +
                         "; two ranks of one NCCL communicator use the same GPU, which NCCL refuses: give each "
                         "rank its own device (torch.cuda.set_device(local_rank)), or, to test on one GPU, give "
                         "each rank its own NCCL_HOSTID so that NCCL treats them as separate hosts");
      }
      return Error(ErrorKind::InvalidUsage, text);
    case ncclRemoteError:
      return Error(ErrorKind::PeerFailure, text + "; a peer of this NCCL communicator failed or went away");
    case ncclSystemError:
      return Error(ErrorKind::PeerFailure,
                   text + "; a system call failed, most often because a peer or the network went away");
    default: return Error(ErrorKind::Internal, text);
  }
}

std::string version() {
  const int code = versionCode();
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

// ---- uses of the handle ------------------------------------------------------------------------

class Communicator::Use {
 public:
  explicit Use(Communicator& c) : c_(c) {
    std::lock_guard<std::mutex> lock(c.useMutex_);
    if (c.stopping_.load() || c.freed_) throw Error(ErrorKind::Aborted, "the NCCL communicator was aborted or closed");
    ++c.uses_;
    ++tUseDepth;
  }
  ~Use() {
    --tUseDepth;
    std::lock_guard<std::mutex> lock(c_.useMutex_);
    if (--c_.uses_ == 0) c_.usesGone_.notify_all();
  }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;

 private:
  Communicator& c_;
};

template <typename Body>
void Communicator::guarded(const Body& body, bool serialized) {
  std::optional<Error> failure;
  const bool outermost = tUseDepth == 0;
  {
    Use use(*this);
    DeviceGuard device(device_);
    std::unique_lock<std::recursive_mutex> calls(calls_, std::defer_lock);
    if (serialized) calls.lock();
    try {
      body();
    } catch (const Error& error) {
      if (!outermost) throw;
      failure = error;
    }
  }
  if (!failure) return;
  // Whatever went wrong (a deadline, a peer, a refused call), the communicator's state is unknown now:
  // peers may wait in a call this rank will not make. Abort, so they fail too instead of hanging.
  if (failure->kind() != ErrorKind::Aborted) abort();
  throw *failure;
}

std::string Communicator::lastError() const { return comm_ != nullptr ? ncclGetLastError(comm_) : ""; }

ncclResult_t Communicator::settle(const Deadline& deadline, const char* what) {
  Backoff backoff;
  for (;;) {
    const ncclResult_t state = asyncErrorOf(comm_);
    if (state != ncclInProgress) return state;
    if (abortRequested_.load())
      throw Error(ErrorKind::Aborted, std::string(what) + ": the NCCL communicator was aborted");
    if (deadline.passed()) {
      throw Error(ErrorKind::Timeout, deadline.timedOut() + " " + what + "; the NCCL communicator is aborted");
    }
    backoff.pause();
  }
}

void Communicator::check(ncclResult_t result, const char* what, const Deadline& deadline) {
  if (result == ncclInProgress) result = settle(deadline, what);
  if (result != ncclSuccess) throw describeFailure(result, lastError(), what);
}

// ---- life cycle ---------------------------------------------------------------------------------

Communicator::Communicator(Bootstrap& bootstrap, int rank, int size, int device, const Deadline& deadline)
    : rank_(rank), size_(size), device_(device) {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    throw Error(ErrorKind::InvalidUsage, std::string("no usable CUDA device for NCCL: ") +
                                             (status != cudaSuccess ? cudaGetErrorString(status) : "none found"));
  }
  if (device < 0 || device >= devices) {
    throw Error(ErrorKind::InvalidUsage,
                "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(devices) + " visible)");
  }
  ncclUniqueId id{};
  const std::string key = "hier/nccl/id";
  if (rank == 0) {
    ncclResult_t drawn = ncclGetUniqueId(&id);
    if (drawn != ncclSuccess) throw describeFailure(drawn, "", "ncclGetUniqueId");
    bootstrap.set(key,
                  std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id));
  }
  std::vector<uint8_t> bytes;
  try {
    bytes = bootstrap.get(key, deadline.remaining());
  } catch (const Error& error) {
    if (error.kind() != ErrorKind::Timeout) throw;
    throw Error(ErrorKind::Timeout,
                deadline.timedOut() + " waiting for the first rank of a NCCL communicator to publish its id");
  }
  if (bytes.size() != sizeof id) throw Error(ErrorKind::Internal, "the NCCL unique id in the store has the wrong size");
  std::memcpy(&id, bytes.data(), sizeof id);

  DeviceGuard guard(device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a late or failed peer cannot hold this thread forever
  ncclResult_t result = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    Error failure = describeFailure(result, lastError(), "ncclCommInitRankConfig");
    if (comm_ != nullptr) ncclCommAbort(comm_);
    freed_ = true;
    throw failure;
  }
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, int size, const Deadline& deadline) {
  ncclComm_t made = nullptr;
  guarded([&] {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // as every communicator here: a late peer cannot hold the thread forever
    const ncclResult_t result = ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &made, &config);
    // Non-blocking: the parent says when its part is done; the new one, when it is ready (awaitReady).
    check(result, "ncclCommSplit", deadline);
  });
  if (made == nullptr) return nullptr;
  std::unique_ptr<Communicator> child(new Communicator(made, key, size, device_));
  child->awaitReady(deadline);
  return child;
}

void Communicator::awaitReady(const Deadline& deadline) {
  guarded([&] { check(ncclInProgress, "setting up the NCCL communicator (a rank did not join)", deadline); });
}

Communicator::~Communicator() { abort(); }

void Communicator::abort() {
  abortRequested_ = true;
  stopping_ = true;
  std::unique_lock<std::mutex> lock(useMutex_);
  usesGone_.wait(lock, [&] { return uses_ == 0; });
  if (freed_ || comm_ == nullptr) return;
  freed_ = true;
  DeviceGuard guard(device_);
  ncclCommAbort(comm_);
}

void Communicator::close(const Deadline& deadline) {
  {
    std::unique_lock<std::mutex> lock(useMutex_);
    if (freed_ || stopping_.exchange(true)) return;  // done, or an abort() is under way
    usesGone_.wait(lock, [&] { return uses_ == 0 || abortRequested_.load(); });
    if (abortRequested_) return;
    ++uses_;  // close's own use: an abort() from now on waits for it, after telling it to give up
  }
  bool finalized = false;
  try {
    DeviceGuard guard(device_);
    std::lock_guard<std::recursive_mutex> calls(calls_);
    ncclResult_t result = ncclCommFinalize(comm_);
    if (result == ncclInProgress) result = settle(deadline, "finishing what the NCCL communicator has enqueued");
    finalized = result == ncclSuccess;
  } catch (const Error&) {
  }
  bool freed = false;
  {
    std::lock_guard<std::mutex> lock(useMutex_);
    --uses_;
    if (finalized && !abortRequested_ && !freed_) {
      DeviceGuard guard(device_);
      ncclCommDestroy(comm_);
      freed_ = true;
    }
    freed = freed_;
    usesGone_.notify_all();
  }
  if (!freed) abort();  // a peer is gone, or the deadline passed: NCCL would wait for it forever
}

// ---- operations ---------------------------------------------------------------------------------

bool Communicator::scales(DataType dtype) const { return scalesOn(dtype, size_, versionCode()); }

void Communicator::allReduce(const void* send, void* recv, size_t count, DataType dtype, const Reduction& how,
                             cudaStream_t stream, const Deadline& deadline) {
  const ncclDataType_t type = typeOf(dtype);
  guarded([&] {
    ReductionOp op(comm_, size_, dtype, how);
    check(ncclAllReduce(send, recv, count, type, op.op(), comm_, stream), "ncclAllReduce", deadline);
  });
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType dtype, const Reduction& how, int root,
                          cudaStream_t stream, const Deadline& deadline) {
  const ncclDataType_t type = typeOf(dtype);
  guarded([&] {
    ReductionOp op(comm_, size_, dtype, how);
    check(ncclReduce(send, recv, count, type, op.op(), root, comm_, stream), "ncclReduce", deadline);
  });
}

void Communicator::broadcast(const void* send, void* recv, size_t count, DataType dtype, int root, cudaStream_t stream,
                             const Deadline& deadline) {
  const ncclDataType_t type = typeOf(dtype);
  guarded([&] { check(ncclBroadcast(send, recv, count, type, root, comm_, stream), "ncclBroadcast", deadline); });
}

void Communicator::reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, const Reduction& how,
                                 cudaStream_t stream, const Deadline& deadline) {
  const ncclDataType_t type = typeOf(dtype);
  guarded([&] {
    ReductionOp op(comm_, size_, dtype, how);
    check(ncclReduceScatter(send, recv, recvCount, type, op.op(), comm_, stream), "ncclReduceScatter", deadline);
  });
}

void Communicator::allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream,
                             const Deadline& deadline) {
  const ncclDataType_t type = typeOf(dtype);
  guarded([&] { check(ncclAllGather(send, recv, sendCount, type, comm_, stream), "ncclAllGather", deadline); });
}

void Communicator::send(const void* data, size_t bytes, int peer, cudaStream_t stream, const Deadline& deadline) {
  guarded([&] { check(ncclSend(data, bytes, ncclUint8, peer, comm_, stream), "ncclSend", deadline); });
}

void Communicator::recv(void* data, size_t bytes, int peer, cudaStream_t stream, const Deadline& deadline) {
  guarded([&] { check(ncclRecv(data, bytes, ncclUint8, peer, comm_, stream), "ncclRecv", deadline); });
}

void Communicator::grouped(const std::function<void()>& calls, const Deadline& deadline) {
  guarded([&] {
    check(ncclGroupStart(), "ncclGroupStart", deadline);
    try {
      calls();
    } catch (...) {
      // Close the group before leaving it: an open group would swallow the next call on this thread.
      ncclGroupEnd();
      throw;
    }
    check(ncclGroupEnd(), "ncclGroupEnd", deadline);
  });
}

void Communicator::waitFor(cudaEvent_t event, const Deadline& deadline) {
  // Not serialized with the calls: the thread that enqueues the next steps must not wait for this one.
  guarded(
      [&] {
        CaptureModeGuard capture;
        Backoff backoff;
        for (;;) {
          const cudaError_t status = cudaEventQuery(event);
          if (status == cudaSuccess) return;
          if (status != cudaErrorNotReady) checkCuda(status, "waiting for the device");
          if (auto error = pollAsyncError()) throw *error;
          if (abortRequested_.load()) throw Error(ErrorKind::Aborted, "the NCCL communicator was aborted");
          if (deadline.passed()) {
            throw Error(ErrorKind::Timeout,
                        deadline.timedOut() + " waiting for the device; the NCCL communicator is aborted");
          }
          backoff.pause();
        }
      },
      /*serialized=*/false);
}

std::optional<Error> Communicator::pollAsyncError() {
  // NCCL allows one thread at a time on a communicator: when another is in a call, it will hear of the
  // error itself.
  std::unique_lock<std::recursive_mutex> calls(calls_, std::try_to_lock);
  if (!calls.owns_lock()) return std::nullopt;
  const ncclResult_t state = asyncErrorOf(comm_);
  if (state == ncclSuccess || state == ncclInProgress) return std::nullopt;
  return describeFailure(state, lastError(), "NCCL");
}

std::optional<Error> Communicator::asyncError() {
  try {
    Use use(*this);
    return pollAsyncError();
  } catch (const Error&) {
    return std::nullopt;  // aborted or closed: nothing more to report
  }
}

}  // namespace hier::transport::nccl
