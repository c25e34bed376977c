// NCCL for device buffers: a non-blocking communicator made through the bootstrap, the mapping of the
// transport's types and ops onto NCCL's, and every wait bounded by a deadline and by abort() (a failed
// or late peer makes the communicator abort, never hang). Torch-free: the plugin passes streams and
// pointers.
//
// Threads. Any thread may call any method. Every call that touches the NCCL handle holds a use of it
// (a count); abort() and close() first make new uses fail and in-flight ones give up (they poll, and
// look at the abort flag each time), then wait until no use is left before they free the handle. So an
// abort from the watchdog never frees the handle under a call on the executor or a network thread.
// NCCL itself takes one thread at a time on a communicator (a whole group from one thread): the calls
// hold a lock for that; waitFor and asyncError, which only ask, skip the question while it is held.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "transport/base/bootstrap.h"
#include "transport/base/deadline.h"
#include "transport/base/error.h"
#include "transport/base/types.h"

namespace hier::transport::nccl {

// NCCL's element type for `dtype`; bool travels as uint8. No complex type in NCCL: the caller reduces
// complex tensors as pairs of reals.
std::optional<ncclDataType_t> dataType(DataType dtype);

// NCCL's reduction for `op` on `dtype`, or why there is none. bool's ops map onto uint8 MIN/MAX (0/1).
struct ReductionMapping {
  std::optional<ncclRedOp_t> op;
  std::string unsupported;
};
ReductionMapping mapReduction(ReduceOp op, DataType dtype);
// Whether NCCL can reduce `dtype` with a scale (PREMUL_SUM): the floating-point types.
bool scales(DataType dtype);
// Whether NCCL `version` (ncclGetVersion's code, 22809 for 2.28.9) scales a one-rank reduction right.
// Before 2.29.7 its one-rank kernel leaves the last elements of an AVG or PREMUL_SUM unwritten when the
// count is not a multiple of its block count (NVIDIA/nccl#1950; torch 2.11 ships 2.28.9).
bool scalesOnOneRank(int version);
// Whether a communicator of `ranks` ranks under NCCL `version` reduces `dtype` with a scale, and right.
bool scalesOn(DataType dtype, int ranks, int version);
// ncclGetVersion's code of the NCCL loaded.
int versionCode();

// What a failed NCCL call amounts to, from its result and NCCL's last error text: a refusal of how it
// was used (two ranks on one GPU, bad arguments) is the caller's to fix; a remote or system error is a
// peer that failed or went away; the rest is internal. The message says which and what to do.
Error describeFailure(ncclResult_t result, const std::string& lastError, const std::string& what);

class Communicator {
 public:
  // Starts making a communicator over `size` ranks, this one on CUDA `device`: rank 0 draws the unique
  // id and publishes it under "hier/nccl/id" in `bootstrap` (give each communicator a bootstrap of its
  // own prefix), the others read it within the deadline; then NCCL's non-blocking initialisation is
  // started. awaitReady() finishes it. Throws Error with NCCL's or CUDA's own words.
  Communicator(Bootstrap& bootstrap, int rank, int size, int device, const Deadline& deadline);
  // Frees the handle: close() when nobody did, within a few seconds, else abort.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Polls the initialisation until done; on the deadline, an abort() or an error: aborts and throws.
  void awaitReady(const Deadline& deadline);

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  // Whether this communicator's reductions take a scale (Reduction::scale) on `dtype` and get it right:
  // not on one rank under an NCCL with the one-rank bug (scalesOnOneRank); the caller scales then.
  bool scales(DataType dtype) const;

  // Enqueue on `stream`; `deadline` bounds how long NCCL may take to accept the call (non-blocking mode
  // answers "in progress" while it sets the call up). A Reduction's scale makes a PREMUL_SUM op.
  void allReduce(const void* send, void* recv, size_t count, DataType dtype, const Reduction& how, cudaStream_t stream,
                 const Deadline& deadline);
  void reduce(const void* send, void* recv, size_t count, DataType dtype, const Reduction& how, int root,
              cudaStream_t stream, const Deadline& deadline);
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root, cudaStream_t stream,
                 const Deadline& deadline);
  void reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, const Reduction& how,
                     cudaStream_t stream, const Deadline& deadline);
  void allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream,
                 const Deadline& deadline);
  void send(const void* data, size_t bytes, int peer, cudaStream_t stream, const Deadline& deadline);
  void recv(void* data, size_t bytes, int peer, cudaStream_t stream, const Deadline& deadline);
  // Runs `calls` (calls of this communicator) as one NCCL group. Groups nest.
  void grouped(const std::function<void()>& calls, const Deadline& deadline);

  // Blocks the calling thread until `event` completed, checking NCCL's asynchronous errors; on the
  // deadline, an abort() or an error: aborts the communicator and throws.
  void waitFor(cudaEvent_t event, const Deadline& deadline);
  // NCCL's asynchronous error, if any (the watchdog's question): a peer failed, or the network did.
  std::optional<Error> asyncError();

  // ncclCommSplit, which every rank of this communicator calls: a rank with `color` >= 0 joins the new
  // communicator of the ranks that pass the same color, as rank `key` of `size`; one with a negative
  // color takes no part and gets null. Returns once the new one is ready; on the deadline, an abort()
  // or an error, aborts and throws.
  std::unique_ptr<Communicator> split(int color, int key, int size, const Deadline& deadline);

  // Aborts (idempotent, from any thread, returns once in-flight calls gave up): pending and later
  // operations fail instead of hanging.
  void abort();
  // Aborted or closed: no call is taken any more.
  bool aborted() const { return stopping_.load(); }
  // Finishes what is enqueued and frees the handle (ncclCommFinalize, then destroy), within
  // `deadline`; aborts instead when that passes (a peer is gone). Idempotent.
  void close(const Deadline& deadline);

 private:
  // One NCCL made from another (split).
  Communicator(ncclComm_t comm, int rank, int size, int device)
      : rank_(rank), size_(size), device_(device), comm_(comm) {}
  class Use;  // a call in flight on the handle; see the header comment
  // Runs `body` under a use, on this communicator's device; when it fails, aborts (the outermost call
  // only: abort() waits for every use) and rethrows.
  // `serialized`: under the calls' lock (every NCCL call; not a wait that only asks).
  template <typename Body>
  void guarded(const Body& body, bool serialized = true);
  // NCCL's asynchronous error, unless another thread is in a call (then it will hear of it itself).
  std::optional<Error> pollAsyncError();
  // Turns NCCL's answer into success or an Error; ncclInProgress is polled until NCCL took the call.
  void check(ncclResult_t result, const char* what, const Deadline& deadline);
  // Polls ncclCommGetAsyncError while it says "in progress".
  ncclResult_t settle(const Deadline& deadline, const char* what);
  std::string lastError() const;

  const int rank_;
  const int size_;
  const int device_;
  ncclComm_t comm_ = nullptr;

  std::recursive_mutex calls_;  // one thread at a time in NCCL on this communicator
  std::mutex useMutex_;
  std::condition_variable usesGone_;
  int uses_ = 0;
  std::atomic<bool> stopping_{false};        // no new use: set first thing by abort() and close()
  std::atomic<bool> abortRequested_{false};  // uses in flight give up: set by abort()
  bool freed_ = false;                       // the handle was aborted or destroyed (under useMutex_)
};

// NCCL's version as a string ("2.28.9"), for diagnostics.
std::string version();

}  // namespace hier::transport::nccl
