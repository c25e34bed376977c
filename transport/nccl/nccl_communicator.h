// NCCL for device buffers: a non-blocking communicator made through the bootstrap, the mapping of the
// transport's types and ops onto NCCL's, and every wait bounded by a deadline (a failed or late peer
// makes the communicator abort, never hang). Torch-free: the plugin passes streams and pointers.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "transport/bootstrap.h"
#include "transport/types.h"

namespace hier::transport::nccl {

using Clock = std::chrono::steady_clock;

// NCCL's element type for `dtype`; bool travels as uint8. No complex type in NCCL: the caller reduces
// complex tensors as pairs of reals.
std::optional<ncclDataType_t> dataType(DataType dtype);

// NCCL's reduction for `op` on `dtype`, or why there is none. bool's ops map onto uint8 MIN/MAX (0/1).
struct Reduction {
  std::optional<ncclRedOp_t> op;
  std::string unsupported;
};
Reduction reduction(ReduceOp op, DataType dtype);

struct Deadline {
  Clock::time_point when;
  std::chrono::milliseconds timeout;
};

class Communicator {
 public:
  // Collective over `size` ranks, each on its own `device`: rank 0 draws the unique id and publishes it
  // under "hier/nccl/id", the others read it; NCCL's non-blocking initialisation is polled until done or
  // the deadline, when it is aborted. Throws Error with NCCL's or CUDA's own words.
  Communicator(Bootstrap& bootstrap, int rank, int size, int device, const Deadline& deadline);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  ncclComm_t raw() const { return comm_; }

  // Enqueue on `stream`. PREMUL_SUM's factor (scalar, host) makes a temporary NCCL op.
  void allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, cudaStream_t stream,
                 std::optional<double> premultiply = std::nullopt);
  void reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root, cudaStream_t stream);
  void broadcast(void* data, size_t count, DataType dtype, int root, cudaStream_t stream);
  void reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op, cudaStream_t stream,
                     std::optional<double> premultiply = std::nullopt);
  void allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream);
  // In place, over consecutive parts of `data` of `counts[p]` elements, one per rank (sizes may differ by
  // rank): afterwards rank p's part p holds the reduction of every rank's part p (reduceScatterParts),
  // or every rank holds every rank's part p (allGatherParts). Equal parts take NCCL's reduce-scatter and
  // all-gather; unequal ones one grouped reduce or broadcast per part.
  void reduceScatterParts(void* data, const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                          cudaStream_t stream);
  void allGatherParts(void* data, const std::vector<size_t>& counts, DataType dtype, cudaStream_t stream);
  // One NCCL group of reduces (into `recv` on `root`) or broadcasts (from `send` on `root` into `recv`
  // everywhere), each with its own buffers and root: the node steps of the rails schedules.
  struct Rooted {
    const void* send;
    void* recv;
    size_t count;
    int root;
  };
  void reduceRooted(const std::vector<Rooted>& calls, DataType dtype, ReduceOp op, cudaStream_t stream);
  void broadcastRooted(const std::vector<Rooted>& calls, DataType dtype, cudaStream_t stream);
  // One grouped call: for every peer p, sends[p] bytes from `send` + sendOffsets[p] and receives recvs[p]
  // into `recv` + recvOffsets[p] (all-to-all with uneven splits, gather, scatter).
  void exchange(const void* send, const std::vector<size_t>& sendOffsets, const std::vector<size_t>& sends,
                void* recv, const std::vector<size_t>& recvOffsets, const std::vector<size_t>& recvs,
                cudaStream_t stream);
  void send(const void* data, size_t bytes, int peer, cudaStream_t stream);
  void recv(void* data, size_t bytes, int peer, cudaStream_t stream);

  // Blocks the calling thread until `event` completed, checking NCCL's asynchronous errors; on the
  // deadline or an error, aborts the communicator and throws.
  void waitFor(cudaEvent_t event, const Deadline& deadline);
  // Aborts (idempotent): pending and later operations fail instead of hanging.
  void abort();
  bool aborted() const { return aborted_.load(); }

 private:
  // Runs `calls` (NCCL calls on this communicator) as one NCCL group, on this communicator's device.
  void grouped(const std::function<void()>& calls);
  // Turns NCCL's answer into success or an Error; ncclInProgress is polled to its end (non-blocking mode).
  void check(ncclResult_t result, const char* what);

  int rank_;
  int size_;
  int device_;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};  // set by whichever thread gives up first (waitFor, the watchdog)
};

// NCCL's version as a string ("2.30.7"), for diagnostics.
std::string version();

}  // namespace hier::transport::nccl
