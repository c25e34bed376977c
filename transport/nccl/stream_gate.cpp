#include "transport/nccl/stream_gate.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <string>

#include "transport/base/error.h"

namespace hier::transport::nccl {
namespace {

// cuStreamWaitValue32 through the runtime's entry point query: no link against the driver library, which
// torch loads itself. Null where the driver does not have it.
PFN_cuStreamWaitValue32_v11070 streamWaitValue32() {
  static const PFN_cuStreamWaitValue32_v11070 function = [] {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &found, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      return PFN_cuStreamWaitValue32_v11070(nullptr);
    }
    return reinterpret_cast<PFN_cuStreamWaitValue32_v11070>(found);
  }();
  return function;
}

}  // namespace

bool StreamGate::supported() { return streamWaitValue32() != nullptr; }

StreamGate::StreamGate(uint32_t* counter) : counter_(counter) {
  std::atomic_ref<uint32_t>(*counter_).store(0, std::memory_order_release);
  const cudaError_t status = cudaHostGetDevicePointer(&deviceAddress_, counter_, 0);
  if (status != cudaSuccess) {
    throw Error(ErrorKind::Internal,
                std::string("CUDA: cudaHostGetDevicePointer for a stream gate: ") + cudaGetErrorString(status));
  }
}

void StreamGate::wait(cudaStream_t stream, uint32_t value) {
  const auto wait = streamWaitValue32();
  if (wait == nullptr) throw Error(ErrorKind::Internal, "CUDA: the driver has no cuStreamWaitValue32");
  const CUresult status = wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(deviceAddress_), value,
                               CU_STREAM_WAIT_VALUE_GEQ);
  if (status != CUDA_SUCCESS) {
    throw Error(ErrorKind::Internal, "CUDA: cuStreamWaitValue32 failed (CUresult " + std::to_string(int(status)) +
                                         "): this driver or device takes no stream memory operations");
  }
}

void StreamGate::open(uint32_t value) {
  // Release: what the host wrote for the steps behind the gate (staged results) is visible before the
  // counter that lets them read it.
  std::atomic_ref<uint32_t> counter(*counter_);
  uint32_t now = counter.load(std::memory_order_relaxed);
  while (now < value && !counter.compare_exchange_weak(now, value, std::memory_order_release)) {
  }
}

}  // namespace hier::transport::nccl
