#include "transport/group/group.h"

#include <algorithm>
#include <cstdlib>

#include "transport/base/error.h"
#include "transport/base/host_identity.h"
#include "transport/base/log.h"
#include "transport/base/poll.h"
#include "transport/base/prefix_bootstrap.h"
#include "transport/base/settings.h"
#include "transport/base/store_wait.h"
#include "transport/base/tag.h"

namespace hier::transport {
namespace {

// Slots 3 and 4 of the tag space of the failure notices (below): the exchange of the ranks' records.
uint64_t recordTag(uint32_t groupId, int slot) {
  return makeTag(subGroupId(groupId, SubCommunicator::Node), /*pointToPoint=*/true, uint64_t(slot), 0);
}

std::vector<std::vector<uint8_t>> addressesOf(const std::vector<PeerRecord>& directory) {
  std::vector<std::vector<uint8_t>> addresses;
  for (const auto& record : directory) addresses.push_back(record.address);
  return addresses;
}

// torchrun says how many ranks it started on this host; a whole-world group should see as many here.
// A mismatch means host identities are off (hostnames, containers): say so, it changes every schedule.
void crossCheckWithLauncher(const Topology& t) {
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

Group::Group(std::shared_ptr<Bootstrap> bootstrap, int rank, int size, uint32_t groupId, std::string name,
             const std::string& engineScope)
    : Group(std::move(bootstrap), rank, size, groupId, std::move(name), ucx::Engine::acquire(engineScope), {}, nullptr,
            {}, {}) {}

Group::Group(std::shared_ptr<Bootstrap> bootstrap, int rank, int size, uint32_t groupId, std::string name,
             std::shared_ptr<ucx::Engine> engine, std::vector<int> names, Group* parent, std::vector<int> members,
             std::vector<PeerRecord> directory)
    : communicator_(std::move(bootstrap), rank, size, groupId, std::move(name), std::move(engine), std::move(names),
                    addressesOf(directory)),
      parent_(parent),
      members_(std::move(members)),
      directory_(std::move(directory)) {
  communicator_.setPeerWatch(watch());
}

Group::~Group() = default;

PeerWatch Group::watch() {
  return {[this] { return abortReasonHereOrAbove(); }, [this](int rank) { return peerProcessEnded(rank); }};
}

std::string Group::abortReasonHereOrAbove() const {
  // A sub-group made after its parent was aborted did not get the abort.
  std::string why = communicator_.abortReason();
  return why.empty() && parent_ != nullptr ? parent_->abortReasonHereOrAbove() : why;
}

bool Group::peerProcessEnded(int rank) {
  return parent_ != nullptr ? parent_->peerProcessEnded(members_[size_t(rank)]) : communicator_.peerProcessEnded(rank);
}

const Topology& Group::topology(const Deadline& deadline) {
  if (topologyLearned_.load(std::memory_order_acquire)) return *topology_;
  // Learned once, under its own lock. A throw (the deadline, an abort) leaves it unlearned: the next
  // collective asks again, and fails the same way if the rank never comes. Not std::call_once, whose
  // waiters ThreadSanitizer's pthread_once leaves asleep for good after a throw.
  std::lock_guard<std::mutex> lock(topologyMutex_);
  if (!topology_) {
    if (directory_.empty() && source_) {
      // The source's records, once its own collectives learned them: no exchange. Waited for, not
      // learned here: the source's exchange is its ranks' to make, on its deadlines.
      const auto& records = source_->awaitRecords(deadline, [this] { return !abortReasonHereOrAbove().empty(); });
      std::vector<PeerRecord> directory;
      for (int member : sourceMembers_) directory.push_back(records.at(size_t(member)));
      if (directory[size_t(rank())].address != communicator_.engine().address()) {
        throw Error(ErrorKind::Internal, "'" + name() + "' rank " + std::to_string(rank()) + " took the record of '" +
                                             source_->name() + "' rank " +
                                             std::to_string(sourceMembers_[size_t(rank())]) + ", another process's");
      }
      communicator_.learnAddresses(addressesOf(directory));
      directory_ = std::move(directory);
      source_.reset();  // not kept alive for the host facts: factsSource_ looks it up while it lives
    } else if (directory_.empty()) {
      const auto mine = encodeRecord({hostIdentity(), communicator_.engine().address()});
      std::vector<PeerRecord> directory;
      for (const auto& record : exchangeRecords(communicator_, mine, recordTag(communicator_.groupId(), 3),
                                                recordTag(communicator_.groupId(), 4), deadline)) {
        directory.push_back(decodeRecord(record));
      }
      communicator_.learnAddresses(addressesOf(directory));
      directory_ = std::move(directory);
    }
    std::vector<std::string> hosts;
    for (const auto& record : directory_) hosts.push_back(record.host);
    topology_ = std::make_unique<Topology>(Topology::fromHosts(hosts, rank()));
    if (communicator_.names().empty()) {
      log(LogLevel::Info, "'" + name() + "' rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ": " +
                              topology_->describe());
      crossCheckWithLauncher(*topology_);
    }
    topologyLearned_.store(true, std::memory_order_release);
  }
  return *topology_;
}

void Group::learnFrom(std::shared_ptr<Group> source, std::vector<int> members) {
  if (!source || &source->communicator_.engine() != &communicator_.engine()) return;
  if (members.size() != size_t(size())) {
    throw Error(ErrorKind::Internal, "learnFrom: " + std::to_string(members.size()) + " members for a group of " +
                                         std::to_string(size()) + " ranks");
  }
  for (int member : members) {
    if (member < 0 || member >= source->size()) {
      throw Error(ErrorKind::Internal, "learnFrom: rank " + std::to_string(member) + " is not in '" + source->name() +
                                           "', of " + std::to_string(source->size()) + " ranks");
    }
  }
  std::lock_guard<std::mutex> lock(topologyMutex_);
  if (topology_) return;
  factsSource_ = source;
  source_ = std::move(source);
  sourceMembers_ = std::move(members);
}

const std::vector<PeerRecord>& Group::awaitRecords(const Deadline& deadline, const std::function<bool()>& stopped) {
  pollUntil([this] { return topologyLearned_.load(std::memory_order_acquire); }, deadline,
            [&] { return !abortReasonHereOrAbove().empty() || stopped(); },
            "'" + name() + "', whose ranks' records this group takes, had not learned them by the deadline: a rank " +
                "of it has not run its first collective;");
  return directory_;
}

std::optional<HostFacts> Group::knownHostFacts() {
  if (const NodeArena* own = arenaIfReady()) return own->facts();
  Group* node = nullptr;
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    node = node_.get();
  }
  if (node != nullptr) {
    if (const NodeArena* ofNode = node->arenaIfReady()) return ofNode->facts();
  }
  if (parent_ != nullptr) return parent_->knownHostFacts();
  if (auto source = factsSource_.lock()) return source->knownHostFacts();
  return std::nullopt;
}

NodeArena* Group::arena(const Deadline& deadline) {
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (arenaDecided_) return arena_.get();
  }
  std::lock_guard<std::mutex> building(buildMutex_);
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (arenaDecided_) return arena_.get();
  }
  std::unique_ptr<NodeArena> made;
  if (size() > 1 && topology(deadline).nodeCount() == 1) {
    // A peer that dies or gives up during the setup (a failure notice aborts this communicator then)
    // ends its waits at once, not at the deadline.
    made = NodeArena::create(communicator_.bootstrap(), rank(), size(), settings().shmSlotBytes, deadline,
                             communicator_.names(), watch(), knownHostFacts());
  }
  std::lock_guard<std::mutex> lock(stateMutex_);
  arena_ = std::move(made);
  arenaDecided_ = true;
  if (arena_ && aborted()) arena_->abandon(communicator_.abortReason());
  arenaReady_.store(arena_.get(), std::memory_order_release);
  return arena_.get();
}

NodeArena* Group::arenaIfReady() const { return arenaReady_.load(std::memory_order_acquire); }

std::unique_ptr<Group> Group::makeSub(const std::vector<int>& members, uint32_t kind, const std::string& prefix) {
  static const char* kinds[] = {"", "node", "rail", "leaders"};
  const int index = int(std::find(members.begin(), members.end(), rank()) - members.begin());
  std::vector<int> names;
  std::vector<PeerRecord> directory;
  for (int member : members) {
    names.push_back(communicator_.nameOf(member));
    directory.push_back(directory_[size_t(member)]);
  }
  return std::unique_ptr<Group>(
      new Group(std::make_shared<PrefixBootstrap>(communicator_.sharedBootstrap(), prefix), index, int(members.size()),
                subGroupId(communicator_.groupId(), SubCommunicator(kind)), name() + "/" + kinds[kind],
                communicator_.sharedEngine(), std::move(names), this, members, std::move(directory)));
}

Group& Group::node(const Deadline& deadline) {
  const auto& t = topology(deadline);
  return *sub(&Group::node_, [&] {
    return makeSub(t.nodes[size_t(t.node())], uint32_t(SubCommunicator::Node),
                   "node/" + std::to_string(t.node()) + "/");
  });
}

Group& Group::rail(const Deadline& deadline) {
  const auto& t = topology(deadline);
  return *sub(&Group::rail_, [&] {
    return makeSub(t.rail(t.localRank()), uint32_t(SubCommunicator::Rail),
                   "rail/" + std::to_string(t.localRank()) + "/");
  });
}

Group* Group::leaders(const Deadline& deadline) {
  const auto& t = topology(deadline);
  if (t.localRank() != 0) return nullptr;
  return sub(&Group::leaders_, [&] { return makeSub(t.leaders(), uint32_t(SubCommunicator::Leaders), "leaders/"); });
}

void Group::prepare(const Deadline& deadline) {
  if (size() == 1) return;
  arena(deadline);
  if (topology(deadline).nodeCount() == 1 || !settings().hierarchy) return;
  node(deadline).arena(deadline);
  rail(deadline);
  leaders(deadline);
}

Group* Group::sub(std::unique_ptr<Group> Group::*slot, const std::function<std::unique_ptr<Group>()>& make) {
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (this->*slot) return (this->*slot).get();
  }
  std::lock_guard<std::mutex> building(buildMutex_);
  {
    std::lock_guard<std::mutex> lock(stateMutex_);
    if (this->*slot) return (this->*slot).get();
  }
  std::unique_ptr<Group> made = make();
  std::lock_guard<std::mutex> lock(stateMutex_);
  this->*slot = std::move(made);
  if (aborted()) (this->*slot)->abort("the group was aborted");
  return (this->*slot).get();
}

namespace {

// The point-to-point space of the node sub-group's id, which does no point-to-point: slot 0 for failure
// notices, 1 and 2 for the monitored barrier's check-ins and answers, 3 and 4 for the exchange of the
// ranks' records (topology()).
uint64_t noticeTag(uint32_t groupId, int source) {
  return makeTag(subGroupId(groupId, SubCommunicator::Node), /*pointToPoint=*/true, 0, uint32_t(source));
}
uint64_t checkInTag(uint32_t groupId, int source) {
  return makeTag(subGroupId(groupId, SubCommunicator::Node), /*pointToPoint=*/true, 1, uint32_t(source));
}
uint64_t answerTag(uint32_t groupId) {
  return makeTag(subGroupId(groupId, SubCommunicator::Node), /*pointToPoint=*/true, 2, 0);
}

}  // namespace

void Group::tell(const std::string& text, const Deadline& deadline) {
  // Every notice is kNoticeBytes long (zero-padded): a receive takes exactly the size it posted.
  auto notice = std::make_shared<std::vector<char>>(kNoticeBytes, '\0');
  std::copy_n(text.begin(), std::min(text.size(), kNoticeBytes - 1), notice->begin());
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    try {
      communicator_.send({peer, notice->data(), notice->size(), MemoryType::Host,
                          noticeTag(communicator_.groupId(), rank()), deadline.when, notice});
    } catch (const Error&) {
      // A peer this rank cannot reach (gone, or the group aborted) is not told.
    }
  }
}

void Group::listen(std::function<void(int from, const std::string& text)> hook) {
  auto buffer = std::make_shared<std::vector<char>>(kNoticeBytes + 1, '\0');
  Communicator::Message message{-1,
                                buffer->data(),
                                kNoticeBytes,
                                MemoryType::Host,
                                noticeTag(communicator_.groupId(), 0),
                                Clock::time_point::max(),
                                buffer,
                                [buffer, hook = std::move(hook)](const ucx::Request& request) {
                                  if (!request.succeeded()) return;
                                  hook(int(sourceOf(request.senderTag())), std::string(buffer->data()));
                                },
                                /*standing=*/true};
  communicator_.receive(message, kMatchAnySource);
}

std::vector<int> Group::monitoredBarrier(const Deadline& deadline, bool waitAll) {
  // One fixed tag for every call, like Gloo's barrier it stands outside the collectives' numbering. A
  // check-in that came after rank 0 gave up on it stays, and counts for rank 0's next monitored barrier.
  auto bytes = std::make_shared<std::vector<char>>(size_t(std::max(size(), 2)), '\0');
  const uint32_t id = communicator_.groupId();
  if (rank() != 0) {
    communicator_.send({0, bytes->data(), 1, MemoryType::Host, checkInTag(id, rank()), deadline.when, bytes});
    auto answer =
        communicator_.receive({0, bytes->data() + 1, 1, MemoryType::Host, answerTag(id), deadline.when, bytes});
    communicator_.engine().wait(answer);
    if (!answer->succeeded()) throw Error(answer->errorKind(), answer->errorMessage(), {0});
    return {};
  }
  std::vector<RequestPtr> checkIns(static_cast<size_t>(size()));
  for (int r = 1; r < size(); ++r) {
    checkIns[size_t(r)] =
        communicator_.receive({r, bytes->data() + r, 1, MemoryType::Host, checkInTag(id, r), deadline.when, bytes});
  }
  // A check-in that does not come by the deadline is cancelled then: none is left to take a later one.
  std::vector<int> missing;
  for (int r = 1; r < size(); ++r) {
    communicator_.engine().wait(checkIns[size_t(r)]);
    if (!checkIns[size_t(r)]->succeeded()) {
      missing.push_back(r);
      if (!waitAll) break;
    }
  }
  if (!missing.empty()) return missing;
  for (int r = 1; r < size(); ++r) {
    communicator_.send({r, bytes->data(), 1, MemoryType::Host, answerTag(id), deadline.when, bytes});
  }
  return {};
}

void Group::abort(const std::string& reason) {
  communicator_.abort(reason);
  std::lock_guard<std::mutex> lock(stateMutex_);
  if (arena_) arena_->abandon(reason);
  for (auto* sub : {node_.get(), rail_.get(), leaders_.get()}) {
    if (sub != nullptr) sub->abort(reason);
  }
}

bool Group::firstUse(const std::string& what) {
  std::lock_guard<std::mutex> lock(stateMutex_);
  return announced_.insert(what).second;
}

}  // namespace hier::transport
