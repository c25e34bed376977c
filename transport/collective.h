// One collective operation running on a communicator: it owns the operation's tag, its deadline, the
// scratch memory and the requests, so an algorithm reads as a sequence of sends, receives and waits.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/communicator.h"
#include "transport/types.h"

namespace hier::transport {

class Collective {
 public:
  // `timeout` <= 0 means no deadline. `keepalive` is held by every request until UCX lets go of it:
  // pass whatever owns the caller's buffers.
  Collective(Communicator& communicator, uint64_t sequence, std::chrono::milliseconds timeout,
             std::shared_ptr<const void> keepalive = nullptr);
  // A step of `parent` on one of its sub-communicators: the parent's deadline, the sub-communicator's
  // next sequence number, the parent's buffers kept alive.
  Collective(Communicator& sub, const Collective& parent);
  // Cancels whatever is still outstanding (an algorithm that threw part-way).
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  int rank() const { return communicator_.rank(); }
  int size() const { return communicator_.size(); }
  Communicator& communicator() { return communicator_; }
  Clock::time_point deadline() const { return deadline_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  RequestPtr send(int peer, const void* data, size_t bytes);
  RequestPtr receive(int peer, void* data, size_t bytes);
  RequestPtr send(int peer, const Buffer& buffer) { return send(peer, buffer.data, buffer.bytes()); }
  RequestPtr receive(int peer, const Buffer& buffer) { return receive(peer, buffer.data, buffer.bytes()); }

  // Waits for the requests, then throws an Error describing every one that failed. Clears `requests`.
  void wait(std::vector<RequestPtr>& requests);
  void wait(RequestPtr request);

  // Scratch memory for this operation, at least `bytes`, 64-byte aligned, valid until the collective
  // ends. Call it once per collective, for everything the algorithm needs.
  char* scratch(size_t bytes);

 private:
  Communicator& communicator_;
  // The collective waits for what it sends: the progress thread need not wake for its requests.
  ucx::Engine::Driving driving_;
  const uint64_t sequence_;
  const std::chrono::milliseconds timeout_;
  const Clock::time_point deadline_;
  // Everything the requests must keep alive: the caller's buffers and the scratch area.
  struct Holdings {
    std::shared_ptr<const void> caller;
    std::shared_ptr<char> scratch;
  };
  std::shared_ptr<Holdings> holdings_;
  std::vector<RequestPtr> issued_;
};

}  // namespace hier::transport
