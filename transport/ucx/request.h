// One tagged send or receive in flight, owned jointly by whoever issued it and by the engine until UCX
// reports it complete.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include "transport/base/deadline.h"
#include "transport/base/error.h"

namespace hier::transport::ucx {

class Engine;

class Request {
 public:
  bool done() const {
    auto s = state_.load(std::memory_order_acquire);
    return s == Succeeded || s == Failed;
  }
  bool succeeded() const { return state_.load(std::memory_order_acquire) == Succeeded; }

  // Valid once done().
  ErrorKind errorKind() const { return errorKind_; }
  const std::string& errorMessage() const { return errorMessage_; }
  size_t receivedBytes() const { return receivedBytes_; }
  uint64_t senderTag() const { return senderTag_; }

  // What the request is, for error messages: the peer's rank in its communicator (-1: any source),
  // whether it receives, how many bytes it moves, and when it must be done.
  int peer = -1;
  bool isReceive = false;
  size_t bytes = 0;
  Clock::time_point deadline = Clock::time_point::max();

 private:
  friend class Engine;
  enum State : uint32_t { Pending = 0, Settling = 1, Succeeded = 2, Failed = 3 };

  // Moves the request to its final state once; later calls do nothing. Returns whether this call did.
  bool settle(State final, ErrorKind kind, std::string message);
  // Sleeps until settled.
  void awaitSettled() const;

  std::atomic<uint32_t> state_{Pending};
  ErrorKind errorKind_ = ErrorKind::Internal;
  std::string errorMessage_;
  size_t receivedBytes_ = 0;
  uint64_t senderTag_ = 0;

  // Engine bookkeeping.
  Engine* owner_ = nullptr;
  // The UCX request handle and how many parties still hold it: the issuing thread (until it has
  // published the handle), the completion callback, and any canceller. The last one frees it, so
  // a cancel never touches a handle that UCX has recycled.
  std::atomic<void*> ucx_{nullptr};
  std::atomic<int> handleRefs_{2};
  // Until UCX itself is done with the memory, which can be after the request settled as timed out,
  // the request stays in the engine's outstanding list and `keepalive_` holds the caller's memory.
  bool inFlight_ = false;
  bool cancelled_ = false;
  bool standing_ = false;
  bool upTo_ = false;
  int endpoint_ = -1;  // the engine's endpoint index of the peer, for failure fan-out; -1 when unknown
  int process_ = -1;   // a send's: the endpoint's watch on its peer's process (watchProcess), or -1
  std::shared_ptr<const void> keepalive_;
  std::function<void(const Request&)> onSettled_;
  std::list<std::shared_ptr<Request>>::iterator self_;
};

}  // namespace hier::transport::ucx
