#include "transport/group/point_to_point.h"

#include <algorithm>

#include "transport/base/tag.h"

namespace hier::transport {
namespace {

TransferOutcome outcomeOf(const ucx::Request& request) {
  return TransferOutcome{request.succeeded(), request.errorKind(), request.errorMessage(),
                         int(sourceOf(request.senderTag()))};
}

Communicator::Message messageOf(Communicator& communicator, const PointToPoint& message, bool sending) {
  // A send names its sender; a receive names whom it expects (any: masked off below).
  const uint32_t source = uint32_t(sending ? communicator.rank() : std::max(message.peer, 0));
  std::function<void(const ucx::Request&)> onSettled;
  if (message.onSettled) {
    onSettled = [hook = message.onSettled](const ucx::Request& request) { hook(outcomeOf(request)); };
  }
  return Communicator::Message{message.peer,
                               message.data,
                               message.bytes,
                               message.memory,
                               makeTag(communicator.groupId(), true, message.tag, source),
                               message.deadline.when,
                               message.keepalive,
                               std::move(onSettled)};
}

}  // namespace

bool Transfer::done() const { return request_->done(); }

void Transfer::wait() {
  if (auto engine = engine_.lock()) engine->wait(request_);
}

TransferOutcome Transfer::outcome() const { return outcomeOf(*request_); }

std::shared_ptr<Transfer> send(Communicator& communicator, const PointToPoint& message) {
  auto request = communicator.send(messageOf(communicator, message, true));
  return std::shared_ptr<Transfer>(new Transfer(std::move(request), communicator.sharedEngine()));
}

std::shared_ptr<Transfer> receive(Communicator& communicator, const PointToPoint& message) {
  const uint64_t mask = message.peer < 0 ? kMatchAnySource : kMatchAll;
  auto request = communicator.receive(messageOf(communicator, message, false), mask);
  return std::shared_ptr<Transfer>(new Transfer(std::move(request), communicator.sharedEngine()));
}

}  // namespace hier::transport
