// One collective operation running on a group: it owns the operation's tag, its deadline, the scratch
// memory and the requests, so an algorithm reads as a sequence of sends, receives and waits.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/base/deadline.h"
#include "transport/base/types.h"
#include "transport/group/communicator.h"
#include "transport/group/group.h"

namespace hier::transport {

class Collective {
 public:
  // `keepalive` is held by every request until UCX lets go of it: pass whatever owns the caller's
  // buffers. A timeout <= 0 means no deadline.
  Collective(Group& group, uint64_t sequence, const Deadline& deadline, std::shared_ptr<const void> keepalive = nullptr)
      : Collective(group, sequence, deadline, std::move(keepalive), /*planning=*/false) {}
  Collective(Group& group, uint64_t sequence, std::chrono::milliseconds timeout,
             std::shared_ptr<const void> keepalive = nullptr)
      : Collective(group, sequence, Deadline::after(timeout), std::move(keepalive)) {}
  // A step of `parent` on one of its sub-groups: the parent's deadline, the sub-group's next sequence
  // number, the parent's buffers kept alive.
  Collective(Group& sub, const Collective& parent);
  // A collective that moves nothing, for the pass of a schedule that only enqueues its device steps
  // (hierarchy/node_steps.h): the group and the deadline, but no tag space of its own, and none drawn
  // for the steps made from it. A send or a receive on it, or on such a step, throws.
  static Collective planning(Group& group, const Deadline& deadline) {
    return Collective(group, kPlanning, deadline, nullptr, /*planning=*/true);
  }
  // Cancels whatever is still outstanding (an algorithm that threw part-way).
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  Group& group() { return group_; }
  Communicator& communicator() { return group_.communicator(); }
  const Deadline& deadline() const { return deadline_; }
  // A step of a parent collective on one of its sub-groups (made by the second constructor).
  bool isStep() const { return step_; }

  // `memory`: where the bytes live, for UCX (device memory only in the network steps that move a CUDA
  // tensor's bytes themselves, ucx/cuda_direct.h).
  RequestPtr send(int peer, const void* data, size_t bytes, MemoryType memory = MemoryType::Host);
  RequestPtr receive(int peer, void* data, size_t bytes, MemoryType memory = MemoryType::Host);
  // A receive of any message up to `capacity` bytes; the request's receivedBytes() says how long it was.
  RequestPtr receiveUpTo(int peer, void* data, size_t capacity);
  RequestPtr send(int peer, const Buffer& buffer) { return send(peer, buffer.data, buffer.bytes(), buffer.memory); }
  RequestPtr receive(int peer, const Buffer& buffer) {
    return receive(peer, buffer.data, buffer.bytes(), buffer.memory);
  }

  // Waits for the requests, then throws an Error describing every one that failed. Clears `requests`.
  void wait(std::vector<RequestPtr>& requests);
  void wait(RequestPtr request);

  // Scratch memory for this operation, at least `bytes`, 64-byte aligned, valid until the collective
  // ends. Call it once per collective, for everything the algorithm needs.
  char* scratch(size_t bytes);

 private:
  static constexpr uint64_t kPlanning = ~uint64_t(0);
  Collective(Group& group, uint64_t sequence, const Deadline& deadline, std::shared_ptr<const void> keepalive,
             bool planning);
  // Throws for a planning collective.
  void checkMoves() const;

  Group& group_;
  // The collective waits for what it sends: the progress thread need not wake for its requests. A
  // planning collective sends nothing, and must not keep the progress thread from other threads' requests.
  std::optional<ucx::Engine::Driving> driving_;
  const uint64_t sequence_;
  const Deadline deadline_;
  const bool step_;
  const bool planning_;
  // Everything the requests must keep alive: the caller's buffers and the scratch area.
  struct Holdings {
    std::shared_ptr<const void> caller;
    std::shared_ptr<char> scratch;
  };
  std::shared_ptr<Holdings> holdings_;
  std::vector<RequestPtr> issued_;
};

}  // namespace hier::transport
