#include "transport/group/communicator.h"

#include <algorithm>
#include <cstdlib>

#include "transport/base/error.h"
#include "transport/base/tag.h"

namespace hier::transport {
namespace {

std::string addressKey(int rank) { return "hier/addr/" + std::to_string(rank); }

}  // namespace

Communicator::Communicator(std::shared_ptr<Bootstrap> bootstrap, int rank, int size, uint32_t groupId, std::string name,
                           std::shared_ptr<ucx::Engine> engine, std::vector<int> names,
                           std::vector<std::vector<uint8_t>> addresses)
    : bootstrap_(std::move(bootstrap)),
      engine_(std::move(engine)),
      rank_(rank),
      size_(size),
      groupId_(groupId),
      name_(std::move(name)),
      endpoints_(size_t(std::max(size, 0)), -1),
      watchEndpoints_(size_t(std::max(size, 0)), kNotLooked),
      names_(std::move(names)) {
  if (size <= 0 || uint32_t(size) > kMaxRanks || rank < 0 || rank >= size) {
    throw Error(ErrorKind::InvalidUsage, "a communicator needs 0 <= rank < size <= " + std::to_string(kMaxRanks) +
                                             ", got rank " + std::to_string(rank) + " of " + std::to_string(size));
  }
  if (addresses.empty()) {
    bootstrap_->set(addressKey(rank_), engine_->address());
  } else {
    learnAddresses(std::move(addresses));
  }
}

void Communicator::learnAddresses(std::vector<std::vector<uint8_t>> addresses) {
  if (addresses.size() != size_t(size_)) {
    throw Error(ErrorKind::Internal, "told " + std::to_string(addresses.size()) + " addresses for a communicator of " +
                                         std::to_string(size_) + " ranks");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  addresses_ = std::move(addresses);
}

Communicator::~Communicator() { abort("the communicator was destroyed"); }

template <typename Wanted>
std::vector<RequestPtr> Communicator::liveRequests(Wanted wanted) const {
  std::vector<RequestPtr> found;
  for (const auto& weak : live_) {
    auto request = weak.lock();
    if (request && wanted(*request)) found.push_back(std::move(request));
  }
  return found;
}

int Communicator::endpointOf(int peer, Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (endpoints_.at(size_t(peer)) >= 0) return endpoints_[size_t(peer)];
  }
  auto address = knownAddress(peer);
  if (!address) {
    address = awaitPublished(*bootstrap_, addressKey(peer), peer, nameOf(peer), Deadline{deadline, {}}, peerWatch_,
                             " to publish its address", ": it has not joined this group");
  }
  int endpoint;
  try {
    endpoint = engine_->connect(*address);
  } catch (const Error& error) {
    // The engine knows an address, not a rank: name the rank, which is what the caller can act on.
    throw Error(error.kind(), "cannot reach rank " + std::to_string(nameOf(peer)) + ": " + error.what(),
                {nameOf(peer)});
  }
  // Receives from this peer posted before it had published its address have no endpoint to fail with
  // (endpointToWatch): they get this one. A receive that another thread posts meanwhile is either in
  // live_ by now or sees the endpoint in remember(): both look under mutex_, each after its own change.
  std::vector<RequestPtr> unwatched;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    endpoints_[size_t(peer)] = endpoint;
    unwatched = liveRequests([peer](const ucx::Request& r) { return r.isReceive && r.peer == peer && !r.done(); });
  }
  for (auto& request : unwatched) engine_->watchWith(*request, endpoint);
  return endpoint;
}

int Communicator::endpointToWatch(int peer) {
  // A receive needs no endpoint, but with one the engine fails it once the peer's process ends, which
  // UCX does not report between the ranks of one machine, or once UCX fails the connection to the peer
  // that a send makes later (ucx::Engine::endpointToWatch). One look per peer, once it has published its
  // address (it does before it sends anything): never a wait.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (endpoints_.at(size_t(peer)) >= 0) return endpoints_[size_t(peer)];
    if (watchEndpoints_[size_t(peer)] != kNotLooked) return watchEndpoints_[size_t(peer)];
  }
  auto address = knownAddress(peer);
  if (!address) {
    if (!bootstrap_->check({addressKey(peer)})) return -1;
    address = bootstrap_->get(addressKey(peer), std::chrono::seconds(10));  // it exists: at once
  }
  const int endpoint = engine_->endpointToWatch(*address);
  std::lock_guard<std::mutex> lock(mutex_);
  watchEndpoints_[size_t(peer)] = endpoint;
  return endpoint;
}

std::optional<std::vector<uint8_t>> Communicator::knownAddress(int peer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (addresses_.empty()) return std::nullopt;
  return addresses_[size_t(peer)];
}

bool Communicator::peerProcessEnded(int peer) {
  const int endpoint = endpointToWatch(peer);
  return endpoint >= 0 && engine_->endpointProcessEnded(endpoint);
}

void Communicator::remember(const RequestPtr& request) {
  int connected = -1;
  std::string aborted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // An abort since the request's throwIfAborted() found live_ without it: it fails here instead, or it
    // would wait for its deadline.
    aborted = abortReason_;
    // A send on another thread may have connected to a receive's peer since endpointToWatch looked, and
    // missed this receive in live_ (endpointOf): the receive takes that endpoint here.
    if (aborted.empty() && request->isReceive && request->peer >= 0) connected = endpoints_[size_t(request->peer)];
    if (aborted.empty()) live_.push_back(request);
    if (live_.size() >= liveCompactAt_) {
      std::erase_if(live_, [](const std::weak_ptr<ucx::Request>& weak) {
        auto r = weak.lock();
        return !r || r->done();
      });
      liveCompactAt_ = std::max<size_t>(64, 2 * live_.size());
    }
  }
  if (!aborted.empty()) return engine_->fail(*request, ErrorKind::Aborted, aborted);
  if (connected >= 0) engine_->watchWith(*request, connected);
}

void Communicator::throwIfAborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!abortReason_.empty()) throw Error(ErrorKind::Aborted, abortReason_);
}

RequestPtr Communicator::send(const Message& message) {
  throwIfAborted();
  int endpoint = endpointOf(message.peer, message.deadline);
  auto request = engine_->send(endpoint, {message.data, message.bytes, message.memory, message.tag, message.peer,
                                          message.deadline, message.keepalive, message.onSettled});
  remember(request);
  return request;
}

RequestPtr Communicator::receive(const Message& message, uint64_t mask) {
  throwIfAborted();
  const int endpoint = message.peer >= 0 ? endpointToWatch(message.peer) : -1;
  auto request =
      engine_->receive({message.data, message.bytes, message.memory, message.tag, message.peer, message.deadline,
                        message.keepalive, message.onSettled, message.standing, message.upTo},
                       mask, endpoint);
  remember(request);
  return request;
}

std::shared_ptr<ucx::Engine::RemoteKey> Communicator::unpackKey(int peer, const std::vector<uint8_t>& key,
                                                                Clock::time_point deadline) {
  throwIfAborted();
  return engine_->unpack(endpointOf(peer, deadline), key);
}

RequestPtr Communicator::writeThenSend(const ucx::Engine::Write& write, const Message& message) {
  throwIfAborted();
  const int endpoint = endpointOf(message.peer, message.deadline);
  auto request = engine_->writeThenSend(endpoint, write,
                                        {message.data, message.bytes, message.memory, message.tag, message.peer,
                                         message.deadline, message.keepalive, message.onSettled});
  remember(request);
  return request;
}

void Communicator::abort(const std::string& reason) {
  std::vector<RequestPtr> victims;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abortReason_.empty()) abortReason_ = reason;
    victims = liveRequests([](const ucx::Request&) { return true; });
    live_.clear();
  }
  for (auto& request : victims) engine_->fail(*request, ErrorKind::Aborted, reason);
}

std::string Communicator::abortReason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return abortReason_;
}

std::shared_ptr<char> Communicator::scratch(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!scratch_ || scratchBytes_ < bytes) {
    constexpr size_t kGranule = size_t(1) << 20;
    size_t size = std::max(kGranule, (bytes + kGranule - 1) / kGranule * kGranule);
    char* memory = static_cast<char*>(std::aligned_alloc(64, size));
    if (memory == nullptr) throw std::bad_alloc();
    scratch_ = std::shared_ptr<char>(memory, std::free);
    scratchBytes_ = size;
  }
  return scratch_;
}

void Communicator::forgetScratch() {
  std::lock_guard<std::mutex> lock(mutex_);
  scratch_.reset();
  scratchBytes_ = 0;
}

}  // namespace hier::transport
