#include "transport/nccl/nccl_communicator.h"

#include <thread>

#include "transport/error.h"
#include "transport/reduce.h"

#include <cstring>

namespace hier::transport::nccl {
namespace {

[[noreturn]] void fail(ErrorKind kind, const std::string& what) { throw Error(kind, what); }

void checkCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail(ErrorKind::Internal, std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

std::chrono::milliseconds left(const Deadline& deadline) {
  if (deadline.when == Clock::time_point::max()) return std::chrono::hours(24 * 365);
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline.when - Clock::now()));
}

// Sets the device for the current thread, restoring the previous one at scope exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    checkCuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) checkCuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
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

Reduction reduction(ReduceOp op, DataType dtype) {
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

std::string version() {
  int code = 0;
  ncclGetVersion(&code);
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

Communicator::Communicator(Bootstrap& bootstrap, int rank, int size, int device, const Deadline& deadline)
    : rank_(rank), size_(size), device_(device) {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    fail(ErrorKind::InvalidUsage, std::string("no usable CUDA device for NCCL: ") +
                                      (status != cudaSuccess ? cudaGetErrorString(status) : "none found"));
  }
  if (device < 0 || device >= devices) {
    fail(ErrorKind::InvalidUsage, "CUDA device " + std::to_string(device) + " does not exist (" +
                                      std::to_string(devices) + " visible)");
  }
  ncclUniqueId id{};
  const std::string key = "hier/nccl/id";
  if (rank == 0) {
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    bootstrap.set(key, std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id));
  }
  auto bytes = bootstrap.get(key, left(deadline));
  if (bytes.size() != sizeof id) fail(ErrorKind::Internal, "the NCCL unique id in the store has the wrong size");
  std::memcpy(&id, bytes.data(), sizeof id);

  DeviceGuard guard(device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a late or failed peer cannot hold this thread forever
  ncclResult_t result = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    fail(ErrorKind::Internal, std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(result) + ": " +
                                  ncclGetLastError(comm_));
  }
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) {
      std::string why = std::string(ncclGetErrorString(state)) + ": " + ncclGetLastError(comm_);
      abort();
      fail(ErrorKind::PeerFailure, "NCCL communicator setup failed: " + why);
    }
    if (Clock::now() >= deadline.when) {
      abort();
      fail(ErrorKind::Timeout, "timed out after " + std::to_string(deadline.timeout.count()) +
                                   " ms setting up the NCCL communicator: a rank did not join");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Communicator::~Communicator() {
  if (comm_ == nullptr) return;
  if (aborted_) return;
  DeviceGuard guard(device_);
  ncclCommDestroy(comm_);
}

void Communicator::abort() {
  if (comm_ == nullptr || aborted_.exchange(true)) return;
  ncclCommAbort(comm_);
}

void Communicator::check(ncclResult_t result, const char* what) {
  if (aborted_) fail(ErrorKind::Aborted, "the NCCL communicator was aborted");
  if (result == ncclSuccess) return;
  if (result == ncclInProgress) {
    // Non-blocking mode: the call was accepted; wait until NCCL has taken it.
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclInProgress) std::this_thread::yield();
    }
    if (state == ncclSuccess) return;
    result = state;
  }
  fail(ErrorKind::Internal, std::string(what) + ": " + ncclGetErrorString(result) + ": " +
                                (comm_ != nullptr ? ncclGetLastError(comm_) : ""));
}

namespace {
ncclDataType_t typeOf(DataType dtype) {
  auto type = dataType(dtype);
  if (!type) throw Error(ErrorKind::InvalidUsage, std::string("NCCL cannot move ") + toString(dtype) + " elements");
  return *type;
}
ncclRedOp_t opOf(ReduceOp op, DataType dtype) {
  auto r = reduction(op, dtype);
  if (!r.op) throw Error(ErrorKind::InvalidUsage, r.unsupported);
  return *r.op;
}
}  // namespace

namespace {

// The NCCL reduction of one call: the fixed op, or for PREMUL_SUM a temporary op whose factor travels
// as a host scalar of the buffer's own type (destroyed with this object, once the call that uses it is
// enqueued, as NCCL allows).
class ReductionOp {
 public:
  ReductionOp(ncclComm_t comm, DataType dtype, ReduceOp op, std::optional<double> premultiply) : comm_(comm) {
    if (!premultiply) {
      op_ = opOf(op, dtype);
      return;
    }
    const double factor = *premultiply;
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
      default: throw Error(ErrorKind::InvalidUsage, "PREMUL_SUM needs a floating-point tensor");
    }
    ncclResult_t result = ncclRedOpCreatePreMulSum(&op_, &scalar, typeOf(dtype), ncclScalarHostImmediate, comm);
    if (result != ncclSuccess) {
      throw Error(ErrorKind::Internal, std::string("ncclRedOpCreatePreMulSum: ") + ncclGetErrorString(result));
    }
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

void Communicator::allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                             cudaStream_t stream, std::optional<double> premultiply) {
  DeviceGuard guard(device_);
  ReductionOp reduction(comm_, dtype, op, premultiply);
  check(ncclAllReduce(send, recv, count, typeOf(dtype), reduction.op(), comm_, stream), "ncclAllReduce");
}

void Communicator::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
                          cudaStream_t stream) {
  DeviceGuard guard(device_);
  check(ncclReduce(send, recv, count, typeOf(dtype), opOf(op, dtype), root, comm_, stream), "ncclReduce");
}

void Communicator::broadcast(void* data, size_t count, DataType dtype, int root, cudaStream_t stream) {
  DeviceGuard guard(device_);
  check(ncclBroadcast(data, data, count, typeOf(dtype), root, comm_, stream), "ncclBroadcast");
}

void Communicator::reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op,
                                 cudaStream_t stream, std::optional<double> premultiply) {
  DeviceGuard guard(device_);
  ReductionOp reduction(comm_, dtype, op, premultiply);
  check(ncclReduceScatter(send, recv, recvCount, typeOf(dtype), reduction.op(), comm_, stream), "ncclReduceScatter");
}

void Communicator::allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream) {
  DeviceGuard guard(device_);
  check(ncclAllGather(send, recv, sendCount, typeOf(dtype), comm_, stream), "ncclAllGather");
}

namespace {

bool allEqual(const std::vector<size_t>& counts) {
  for (size_t count : counts) {
    if (count != counts.front()) return false;
  }
  return true;
}

}  // namespace

void Communicator::reduceScatterParts(void* data, const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                                      cudaStream_t stream) {
  DeviceGuard guard(device_);
  const size_t elementBytes = elementSize(dtype);
  char* base = static_cast<char*>(data);
  if (allEqual(counts)) {
    ReductionOp reduction(comm_, dtype, op, std::nullopt);
    check(ncclReduceScatter(base, base + size_t(rank_) * counts.front() * elementBytes, counts.front(), typeOf(dtype),
                            reduction.op(), comm_, stream),
          "ncclReduceScatter");
    return;
  }
  std::vector<Rooted> calls;
  for (int p = 0; p < size_; ++p) {
    calls.push_back({base, base, counts[size_t(p)], p});
    base += counts[size_t(p)] * elementBytes;
  }
  reduceRooted(calls, dtype, op, stream);
}

void Communicator::allGatherParts(void* data, const std::vector<size_t>& counts, DataType dtype, cudaStream_t stream) {
  DeviceGuard guard(device_);
  const size_t elementBytes = elementSize(dtype);
  char* base = static_cast<char*>(data);
  if (allEqual(counts)) {
    check(ncclAllGather(base + size_t(rank_) * counts.front() * elementBytes, base, counts.front(), typeOf(dtype),
                        comm_, stream),
          "ncclAllGather");
    return;
  }
  std::vector<Rooted> calls;
  for (int p = 0; p < size_; ++p) {
    calls.push_back({base, base, counts[size_t(p)], p});
    base += counts[size_t(p)] * elementBytes;
  }
  broadcastRooted(calls, dtype, stream);
}

void Communicator::grouped(const std::function<void()>& calls) {
  DeviceGuard guard(device_);
  check(ncclGroupStart(), "ncclGroupStart");
  calls();
  check(ncclGroupEnd(), "ncclGroupEnd");
}

void Communicator::reduceRooted(const std::vector<Rooted>& calls, DataType dtype, ReduceOp op, cudaStream_t stream) {
  grouped([&] {
    for (const auto& call : calls) {
      check(ncclReduce(call.send, call.recv, call.count, typeOf(dtype), opOf(op, dtype), call.root, comm_, stream),
            "ncclReduce");
    }
  });
}

void Communicator::broadcastRooted(const std::vector<Rooted>& calls, DataType dtype, cudaStream_t stream) {
  grouped([&] {
    for (const auto& call : calls) {
      check(ncclBroadcast(call.send, call.recv, call.count, typeOf(dtype), call.root, comm_, stream), "ncclBroadcast");
    }
  });
}

void Communicator::exchange(const void* send, const std::vector<size_t>& sendOffsets, const std::vector<size_t>& sends,
                            void* recv, const std::vector<size_t>& recvOffsets, const std::vector<size_t>& recvs,
                            cudaStream_t stream) {
  grouped([&] {
    for (int p = 0; p < size_; ++p) {
      if (sends.size() > size_t(p) && sends[size_t(p)] > 0) {
        check(ncclSend(static_cast<const char*>(send) + sendOffsets[size_t(p)], sends[size_t(p)], ncclUint8, p, comm_,
                       stream),
              "ncclSend");
      }
      if (recvs.size() > size_t(p) && recvs[size_t(p)] > 0) {
        check(ncclRecv(static_cast<char*>(recv) + recvOffsets[size_t(p)], recvs[size_t(p)], ncclUint8, p, comm_, stream),
              "ncclRecv");
      }
    }
  });
}

void Communicator::send(const void* data, size_t bytes, int peer, cudaStream_t stream) {
  DeviceGuard guard(device_);
  check(ncclSend(data, bytes, ncclUint8, peer, comm_, stream), "ncclSend");
}

void Communicator::recv(void* data, size_t bytes, int peer, cudaStream_t stream) {
  DeviceGuard guard(device_);
  check(ncclRecv(data, bytes, ncclUint8, peer, comm_, stream), "ncclRecv");
}

void Communicator::waitFor(cudaEvent_t event, const Deadline& deadline) {
  for (unsigned spins = 0;; ++spins) {
    cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) {
      abort();
      checkCuda(status, "waiting for a NCCL operation");
    }
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      std::string why = std::string(ncclGetErrorString(state)) + ": " + ncclGetLastError(comm_);
      abort();
      fail(ErrorKind::PeerFailure, "NCCL failed: " + why);
    }
    if (Clock::now() >= deadline.when) {
      abort();
      fail(ErrorKind::Timeout, "timed out after " + std::to_string(deadline.timeout.count()) +
                                   " ms waiting for a NCCL operation; the communicator is aborted");
    }
    if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace hier::transport::nccl
