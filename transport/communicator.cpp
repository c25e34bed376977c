#include "transport/communicator.h"

#include <algorithm>
#include <cstdlib>

#include "transport/error.h"
#include "transport/host_identity.h"
#include "transport/log.h"
#include "transport/prefix_bootstrap.h"
#include "transport/settings.h"
#include "transport/tag.h"

namespace hier::transport {
namespace {

std::string addressKey(int rank) { return "hier/addr/" + std::to_string(rank); }

// Bootstrap waits take a duration; "no deadline" becomes a very long one.
std::chrono::milliseconds remaining(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return std::chrono::hours(24 * 365);
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
}

}  // namespace

Communicator::Communicator(std::shared_ptr<Bootstrap> bootstrap, int rank, int size, uint32_t groupId,
                           std::string name, std::shared_ptr<ucx::Engine> engine, std::vector<int> names)
    : bootstrap_(std::move(bootstrap)),
      engine_(std::move(engine)),
      rank_(rank),
      size_(size),
      groupId_(groupId),
      name_(std::move(name)),
      endpoints_(size_t(std::max(size, 0)), -1),
      names_(std::move(names)) {
  if (size <= 0 || uint32_t(size) > kMaxRanks || rank < 0 || rank >= size) {
    throw Error(ErrorKind::InvalidUsage, "a communicator needs 0 <= rank < size <= " + std::to_string(kMaxRanks) +
                                             ", got rank " + std::to_string(rank) + " of " + std::to_string(size));
  }
  bootstrap_->set(addressKey(rank_), engine_->address());
  std::string host = hostIdentity();
  bootstrap_->set("hier/host/" + std::to_string(rank_), std::vector<uint8_t>(host.begin(), host.end()));
}

std::string Communicator::hostOf(int rank, const shm::NodeArena::Deadline& deadline) {
  try {
    auto host = bootstrap_->get("hier/host/" + std::to_string(rank), remaining(deadline.when));
    return std::string(host.begin(), host.end());
  } catch (const Error& error) {
    if (error.kind() != ErrorKind::Timeout) throw;
    throw Error(ErrorKind::Timeout,
                "timed out after " + std::to_string(deadline.timeout.count()) + " ms waiting for rank " +
                    std::to_string(nameOf(rank)) + " to say which host it is on: it has not joined this group",
                {nameOf(rank)});
  }
}

shm::NodeArena* Communicator::nodeArena(const shm::NodeArena::Deadline& deadline) {
  if (arenaDecided_) return arena_.get();
  const std::string mine = hostIdentity();
  bool oneHost = true;
  for (int r = 0; r < size_ && oneHost; ++r) oneHost = hostOf(r, deadline) == mine;
  if (oneHost && size_ > 1) {
    arena_ = shm::NodeArena::create(*bootstrap_, rank_, size_, settings().shmSlotBytes, deadline, names_);
    if (arena_ && aborted()) arena_->abandon();
  }
  arenaDecided_ = true;
  return arena_.get();
}

Communicator::~Communicator() {
  // Sub-communicators go first: they hold requests of the same engine.
  leaders_.reset();
  rail_.reset();
  node_.reset();
  abort("the communicator was destroyed");
}

int Communicator::endpointOf(int peer, Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (endpoints_.at(size_t(peer)) >= 0) return endpoints_[size_t(peer)];
  }
  std::vector<uint8_t> address;
  try {
    address = bootstrap_->get(addressKey(peer), remaining(deadline));
  } catch (const Error& error) {
    if (error.kind() != ErrorKind::Timeout) throw;
    throw Error(ErrorKind::Timeout,
                "rank " + std::to_string(nameOf(peer)) + " never published its address: it has not joined this group",
                {nameOf(peer)});
  }
  int endpoint = engine_->connect(address);
  std::lock_guard<std::mutex> lock(mutex_);
  endpoints_[size_t(peer)] = endpoint;
  return endpoint;
}

void Communicator::remember(const RequestPtr& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  live_.push_back(request);
  if (live_.size() >= liveCompactAt_) {
    std::erase_if(live_, [](const std::weak_ptr<ucx::Request>& weak) {
      auto r = weak.lock();
      return !r || r->done();
    });
    liveCompactAt_ = std::max<size_t>(64, 2 * live_.size());
  }
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
  int endpoint = -1;
  if (message.peer >= 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    endpoint = endpoints_.at(size_t(message.peer));
  }
  auto request = engine_->receive(
      {message.data, message.bytes, message.memory, message.tag, message.peer, message.deadline, message.keepalive,
       message.onSettled},
      mask, endpoint);
  remember(request);
  return request;
}

void Communicator::abort(const std::string& reason) {
  std::vector<RequestPtr> victims;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abortReason_.empty()) abortReason_ = reason;
    for (auto& weak : live_) {
      if (auto request = weak.lock()) victims.push_back(std::move(request));
    }
    live_.clear();
  }
  for (auto& request : victims) engine_->fail(*request, ErrorKind::Aborted, reason);
  if (arena_) arena_->abandon();
  for (auto* sub : {node_.get(), rail_.get(), leaders_.get()}) {
    if (sub != nullptr) sub->abort(reason);
  }
}

bool Communicator::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !abortReason_.empty();
}

namespace {

// torchrun says how many ranks it started on this host; a whole-world group should see as many here.
// A mismatch means host identities are off (hostnames, containers): say so, it changes every schedule.
void crossCheckWithLauncher(const hierarchy::Topology& t) {
  const char* world = std::getenv("WORLD_SIZE");
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  if (world == nullptr || local == nullptr || std::atoi(world) != t.size()) return;
  if (std::atoi(local) != t.localSize()) {
    log(LogLevel::Warning, "the launcher started " + std::string(local) + " ranks on this host, but " +
                               std::to_string(t.localSize()) + " ranks of the world group report this host (" +
                               t.describe() + "); check the hostnames, or set HIER_HOST_ID");
  }
}

}  // namespace

const hierarchy::Topology& Communicator::topology(const shm::NodeArena::Deadline& deadline) {
  if (!topology_) {
    std::vector<std::string> hosts;
    for (int r = 0; r < size_; ++r) hosts.push_back(hostOf(r, deadline));
    topology_ = std::make_unique<hierarchy::Topology>(hierarchy::Topology::fromHosts(hosts, rank_));
    if (names_.empty()) {
      log(LogLevel::Info, "'" + name_ + "' rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                              topology_->describe());
      crossCheckWithLauncher(*topology_);
    }
  }
  return *topology_;
}

namespace {

std::unique_ptr<Communicator> makeSub(Communicator& parent, const std::vector<int>& members, SubCommunicator kind,
                                      const std::string& prefix) {
  int index = int(std::find(members.begin(), members.end(), parent.rank()) - members.begin());
  std::vector<int> names;
  for (int member : members) names.push_back(parent.nameOf(member));
  static const char* kinds[] = {"", "node", "rail", "leaders"};
  return std::make_unique<Communicator>(
      std::make_shared<PrefixBootstrap>(parent.sharedBootstrap(), prefix), index, int(members.size()),
      subGroupId(parent.groupId(), kind), parent.name() + "/" + kinds[int(kind)], parent.sharedEngine(),
      std::move(names));
}

}  // namespace

Communicator& Communicator::nodeCommunicator(const shm::NodeArena::Deadline& deadline) {
  const auto& t = topology(deadline);
  if (!node_) {
    node_ = makeSub(*this, t.nodes[size_t(t.node())], SubCommunicator::Node, "node/" + std::to_string(t.node()) + "/");
  }
  return *node_;
}

Communicator& Communicator::railCommunicator(const shm::NodeArena::Deadline& deadline) {
  const auto& t = topology(deadline);
  if (!rail_) {
    rail_ = makeSub(*this, t.rail(t.localRank()), SubCommunicator::Rail, "rail/" + std::to_string(t.localRank()) + "/");
  }
  return *rail_;
}

Communicator* Communicator::leadersCommunicator(const shm::NodeArena::Deadline& deadline) {
  const auto& t = topology(deadline);
  if (t.localRank() != 0) return nullptr;
  if (!leaders_) leaders_ = makeSub(*this, t.leaders(), SubCommunicator::Leaders, "leaders/");
  return leaders_.get();
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
