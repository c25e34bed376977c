#include "transport/window/window.h"

#include <cstring>
#include <string>

#include "transport/base/error.h"
#include "transport/base/tag.h"

namespace hier::transport {
namespace {

constexpr size_t kHeaderBytes = 2 * sizeof(uint64_t);  // a descriptor's address and length
constexpr size_t kSignalBytes = sizeof(uint64_t);

TransferOutcome outcomeOf(const ucx::Request& request) {
  return TransferOutcome{request.succeeded(), request.errorKind(), request.errorMessage(), request.peer};
}

}  // namespace

Window::Window(Communicator& communicator, uint32_t number, void* data, size_t bytes)
    : communicator_(communicator), number_(number), data_(data) {
  if (number > kMaxUserTag) {
    throw Error(ErrorKind::InvalidUsage, "a group has at most " + std::to_string(kMaxUserTag + 1) + " windows");
  }
  if (bytes > 0) exposed_ = communicator_.engine().expose(data, bytes);
  bytes_.assign(size_t(communicator_.size()), 0);
  bytes_[size_t(communicator_.rank())] = bytes;
}

std::vector<uint8_t> Window::descriptor() const {
  const uint64_t header[2] = {reinterpret_cast<uint64_t>(data_), uint64_t(bytes_[size_t(communicator_.rank())])};
  const size_t keyBytes = exposed_ ? exposed_->key().size() : 0;
  std::vector<uint8_t> bytes(kHeaderBytes + keyBytes);
  std::memcpy(bytes.data(), header, kHeaderBytes);
  if (keyBytes > 0) std::memcpy(bytes.data() + kHeaderBytes, exposed_->key().data(), keyBytes);
  return bytes;
}

void Window::connect(const std::vector<std::vector<uint8_t>>& descriptors, const Deadline& deadline) {
  const auto size = size_t(communicator_.size());
  if (descriptors.size() != size) {
    throw Error(ErrorKind::Internal, "a window needs every rank's descriptor: got " +
                                         std::to_string(descriptors.size()) + " of " + std::to_string(size));
  }
  addresses_.assign(size, 0);
  keys_.assign(size, nullptr);
  for (size_t rank = 0; rank < size; ++rank) {
    const auto& descriptor = descriptors[rank];
    if (descriptor.size() < kHeaderBytes) {
      throw Error(ErrorKind::Internal, "rank " + std::to_string(communicator_.nameOf(int(rank))) +
                                           " sent a malformed window descriptor (a different hier build?)");
    }
    uint64_t header[2];
    std::memcpy(header, descriptor.data(), kHeaderBytes);
    addresses_[rank] = header[0];
    bytes_[rank] = size_t(header[1]);
    if (int(rank) == communicator_.rank() || bytes_[rank] == 0) continue;
    const std::vector<uint8_t> key(descriptor.begin() + kHeaderBytes, descriptor.end());
    keys_[rank] = communicator_.unpackKey(int(rank), key, deadline.when);
  }
}

uint64_t Window::signalTag(int source) const {
  return makeTag(subGroupId(communicator_.groupId(), SubCommunicator::Rail), /*pointToPoint=*/true, number_,
                 uint32_t(source));
}

Communicator::Message Window::signalMessage(int rank, const Deadline& deadline, OnSettled onSettled,
                                            bool receiving) const {
  // The payload says nothing a tag does not: it is there because UCX matches messages, not tags alone.
  auto payload = std::make_shared<uint64_t>(0);
  std::function<void(const ucx::Request&)> hook;
  if (onSettled)
    hook = [onSettled = std::move(onSettled)](const ucx::Request& request) { onSettled(outcomeOf(request)); };
  return Communicator::Message{rank,
                               payload.get(),
                               kSignalBytes,
                               MemoryType::Host,
                               signalTag(receiving ? rank : communicator_.rank()),
                               deadline.when,
                               payload,
                               std::move(hook)};
}

void Window::checkPeer(int rank) const {
  if (rank < 0 || rank >= communicator_.size() || rank == communicator_.rank() || addresses_.empty()) {
    throw Error(ErrorKind::InvalidUsage, "rank " + std::to_string(rank) + " is not a peer of this connected window");
  }
}

std::shared_ptr<Transfer> Window::put(const void* data, size_t bytes, int rank, size_t offset,
                                      std::shared_ptr<const void> keepalive, const Deadline& deadline,
                                      OnSettled onSettled) {
  checkPeer(rank);
  if (bytes > 0 && (offset > bytes_.at(size_t(rank)) || bytes > bytes_[size_t(rank)] - offset)) {
    throw Error(ErrorKind::InvalidUsage, std::to_string(bytes) + " bytes at byte " + std::to_string(offset) +
                                             " do not fit in the " + std::to_string(bytes_[size_t(rank)]) +
                                             " bytes rank " + std::to_string(communicator_.nameOf(rank)) + " exposes");
  }
  auto message = signalMessage(rank, deadline, std::move(onSettled), /*receiving=*/false);
  message.keepalive = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(
      std::move(message.keepalive), std::move(keepalive));
  ucx::Engine::Write write;
  if (bytes > 0) write = {data, bytes, addresses_[size_t(rank)] + offset, keys_[size_t(rank)]};
  auto request = communicator_.writeThenSend(write, message);
  return std::shared_ptr<Transfer>(new Transfer(std::move(request), communicator_.sharedEngine()));
}

std::shared_ptr<Transfer> Window::signal(int rank, const Deadline& deadline, OnSettled onSettled) {
  checkPeer(rank);
  // With nothing to write, the flush still orders the signal after every earlier write to the peer.
  auto request = communicator_.writeThenSend({}, signalMessage(rank, deadline, std::move(onSettled), false));
  return std::shared_ptr<Transfer>(new Transfer(std::move(request), communicator_.sharedEngine()));
}

std::shared_ptr<Transfer> Window::waitSignal(int rank, const Deadline& deadline, OnSettled onSettled) {
  checkPeer(rank);
  auto request = communicator_.receive(signalMessage(rank, deadline, std::move(onSettled), /*receiving=*/true));
  return std::shared_ptr<Transfer>(new Transfer(std::move(request), communicator_.sharedEngine()));
}

}  // namespace hier::transport
