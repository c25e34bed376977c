// A CUDA stream waiting for the host, without a kernel and without the host waiting for the stream: the
// stream waits (cuStreamWaitValue32, a stream memory operation) until a counter in pinned host memory
// reaches a value, and the host raises the counter. It is how a device operation is enqueued whole,
// from the caller's thread, while one of its stages runs on the host later (a network step, a host
// reduction): the node steps after that stage are enqueued behind a gate that the host opens when the
// stage is done, or when it gave up.
//
// The stream's wait is invisible to CUDA's scheduler (CUDA's warning on stream memory operations): the
// host must never make what opens a gate wait for work enqueued after that gate. Here it waits only for
// copies enqueued before it (node_steps.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hier::transport::nccl {

class StreamGate {
 public:
  // Whether the CUDA driver offers the stream memory operations (it does from CUDA 12 on); where it
  // does not, a caller runs its host stage before it enqueues what comes after.
  static bool supported();

  // `counter`: 4 bytes of pinned host memory (cudaHostAlloc, or torch's pinned allocator), zeroed
  // here, that outlive every wait enqueued on it (until the stream passed them).
  explicit StreamGate(uint32_t* counter);

  // Enqueues on `stream` a wait until the counter reaches `value` (1 or more; values below kOpenAll).
  // Throws Error with CUDA's words when the driver refuses it.
  void wait(cudaStream_t stream, uint32_t value);
  // From the host: every wait for `value` or less may go on. Raising only; never lowers the counter.
  void open(uint32_t value);
  // Every wait may go on, whatever it waits for.
  void openAll() { open(kOpenAll); }

  // The counter's value that opens every wait. CUDA compares cyclically ((int32_t)(counter - value) >=
  // 0): any value below this and above 0 is passed without wrapping.
  static constexpr uint32_t kOpenAll = 1u << 30;

 private:
  uint32_t* counter_;
  void* deviceAddress_ = nullptr;
};

}  // namespace hier::transport::nccl
