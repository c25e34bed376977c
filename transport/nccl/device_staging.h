// What the device schedules (allreduce_split_rail, the rails schedules in device_rails.h) share: CUDA
// calls turned into Errors, events, and copies between device memory and the pinned host slots UCX
// carries across nodes. Two slots take turns: fragment f uses slot f % 2, free again because fragment
// f - 2's copy back to the device was enqueued on the same stream before fragment f's copy out, and its
// network step was done before that.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "transport/error.h"

namespace hier::transport::nccl {

inline void checkCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(ErrorKind::Internal, std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

inline void copyToHost(void* host, const void* device, size_t bytes, cudaStream_t stream) {
  checkCuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync to pinned memory");
}

inline void copyToDevice(void* device, const void* host, size_t bytes, cudaStream_t stream) {
  checkCuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync from pinned memory");
}

class Event {
 public:
  Event() { checkCuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) { checkCuda(cudaEventRecord(event_, stream), "cudaEventRecord"); }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace hier::transport::nccl
