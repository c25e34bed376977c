// Point-to-point messages between the ranks of a communicator, matched by the user's tag: the tag
// layout (tag.h) and UCX's requests stay behind this. Messages between the same two ranks with the same
// tag match in the order they were posted.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "transport/base/deadline.h"
#include "transport/base/error.h"
#include "transport/base/types.h"
#include "transport/group/communicator.h"

namespace hier::transport {

// How a transfer ended. `source`: the sender, for a receive (from any rank, too).
struct TransferOutcome {
  bool succeeded = false;
  ErrorKind kind = ErrorKind::Internal;
  std::string message;
  int source = -1;
};

struct PointToPoint {
  int peer = -1;     // the other rank; -1 for a receive from any rank
  uint32_t tag = 0;  // the user's, at most kMaxUserTag
  void* data = nullptr;
  size_t bytes = 0;
  MemoryType memory = MemoryType::Host;
  Deadline deadline;
  std::shared_ptr<const void> keepalive;  // held until UCX is done with `data`
  // Called once the transfer settles, on whichever thread settles it (possibly inside UCX's progress):
  // it must only hand the news on.
  std::function<void(const TransferOutcome&)> onSettled;
};

class Transfer {
 public:
  bool done() const;
  // Blocks, asleep, until done. Returns at once when the engine is gone (it settled every transfer then).
  void wait();
  // Valid once done().
  TransferOutcome outcome() const;

 private:
  friend std::shared_ptr<Transfer> send(Communicator&, const PointToPoint&);
  friend std::shared_ptr<Transfer> receive(Communicator&, const PointToPoint&);
  friend class Window;  // its puts and signals (window/window.h)
  Transfer(RequestPtr request, std::weak_ptr<ucx::Engine> engine)
      : request_(std::move(request)), engine_(std::move(engine)) {}

  RequestPtr request_;
  // Not owned: a transfer must not keep UCX alive after its group is gone.
  std::weak_ptr<ucx::Engine> engine_;
};

// Posts a send to or a receive from `message.peer`. Throws Error when the communicator is aborted or
// the peer never joined within the deadline.
std::shared_ptr<Transfer> send(Communicator& communicator, const PointToPoint& message);
std::shared_ptr<Transfer> receive(Communicator& communicator, const PointToPoint& message);

}  // namespace hier::transport
