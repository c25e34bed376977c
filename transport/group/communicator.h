// A fixed, ordered set of ranks that exchange tagged messages over the process's UCX engine. Only
// messages: what collectives learn about the ranks (hosts, shared memory, sub-groups) is group.h's.
//
// Each rank publishes its worker address under "hier/addr/<rank>" in the bootstrap when the
// communicator is made; a peer reads it the first time it sends to that rank, unless it was told every
// rank's address (learnAddresses: its group exchanges them once, record_exchange.h), so no rank talks to
// the store about peers it never sends to, and after the exchange about none. A sub-group's
// communicator is told its members' addresses when it is made and publishes nothing. Endpoints are
// shared with every other communicator of the process that reaches the same peer process.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "transport/base/bootstrap.h"
#include "transport/base/deadline.h"
#include "transport/base/store_wait.h"
#include "transport/base/types.h"
#include "transport/ucx/engine.h"

namespace hier::transport {

using RequestPtr = std::shared_ptr<ucx::Request>;

class Communicator {
 public:
  // `groupId` must differ between communicators that share a pair of processes (see tag.h): the plugin
  // draws it from a job-wide counter in the store.
  // `engine` is this rank's (see Engine::acquire). A sub-group's communicator passes `names`: its ranks
  // as ranks of the group it is part of, for messages.
  // `addresses`, where given, are every rank's (as learnAddresses); the communicator then publishes none.
  Communicator(std::shared_ptr<Bootstrap> bootstrap, int rank, int size, uint32_t groupId, std::string name,
               std::shared_ptr<ucx::Engine> engine = ucx::Engine::acquire(), std::vector<int> names = {},
               std::vector<std::vector<uint8_t>> addresses = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  uint32_t groupId() const { return groupId_; }
  const std::string& name() const { return name_; }
  // How messages name rank `rank` of this communicator: as a rank of the group it belongs to.
  int nameOf(int rank) const { return names_.empty() ? rank : names_[size_t(rank)]; }
  const std::vector<int>& names() const { return names_; }
  ucx::Engine& engine() { return *engine_; }
  const std::shared_ptr<ucx::Engine>& sharedEngine() const { return engine_; }
  Bootstrap& bootstrap() { return *bootstrap_; }
  const std::shared_ptr<Bootstrap>& sharedBootstrap() const { return bootstrap_; }

  struct Message {
    int peer;
    void* data;
    size_t bytes;
    MemoryType memory;
    uint64_t tag;
    Clock::time_point deadline;
    std::shared_ptr<const void> keepalive;
    std::function<void(const ucx::Request&)> onSettled = nullptr;
    bool standing = false;  // see ucx::Engine::Message::standing
    bool upTo = false;      // see ucx::Engine::Message::upTo
  };
  // Every rank's UCX worker address, by rank: later connections take them from here, not the store.
  void learnAddresses(std::vector<std::vector<uint8_t>> addresses);

  // Posts a send to or a receive from `message.peer`. A receive with peer -1 takes any source (its tag
  // must then be matched with kMatchAnySource).
  RequestPtr send(const Message& message);
  RequestPtr receive(const Message& message, uint64_t mask = ~uint64_t(0));

  // One-sided writes (ucx::Engine::writeThenSend): `peer`'s exposed memory's key made usable here
  // (connecting to the peer first), and a write into that memory followed by `message`.
  std::shared_ptr<ucx::Engine::RemoteKey> unpackKey(int peer, const std::vector<uint8_t>& key,
                                                    Clock::time_point deadline);
  RequestPtr writeThenSend(const ucx::Engine::Write& write, const Message& message);

  // Fails every request this communicator still has outstanding; later posts fail at once.
  void abort(const std::string& reason);
  bool aborted() const { return !abortReason().empty(); }
  std::string abortReason() const;  // empty until aborted

  // Whether `peer`'s process has ended, looked at now. Known for a peer on this machine in this rank's
  // pid namespace once it has published its address; false where it cannot be known.
  bool peerProcessEnded(int peer);
  // What a wait for a peer's address looks at besides the deadline (store_wait.h). Set once, before the
  // communicator is used: its group knows more of the peers than it does (a sub-group's members are its
  // parent's ranks, which published their addresses there).
  void setPeerWatch(PeerWatch watch) { peerWatch_ = std::move(watch); }

  // A reusable, 64-byte-aligned scratch area for the running collective. Only one collective runs on a
  // communicator at a time. forgetScratch() hands the current area over to whoever still holds it (a
  // request UCX has not let go of), so the next collective gets a fresh one.
  std::shared_ptr<char> scratch(size_t bytes);
  void forgetScratch();

 private:
  int endpointOf(int peer, Clock::time_point deadline);
  // `peer`'s address if this communicator was told it (learnAddresses).
  std::optional<std::vector<uint8_t>> knownAddress(int peer) const;
  // The endpoint a receive from `peer` takes: the one sends made, else one made to watch the peer's
  // process where it is on this machine (sends do not take it: endpointOf connects), else -1.
  int endpointToWatch(int peer);
  // Keeps `request` for abort() and endpointOf(); a receive from a peer that sends connected to takes
  // that endpoint, looked at in the same step.
  void remember(const RequestPtr& request);
  // The requests in live_ that `wanted` takes; mutex_ held.
  template <typename Wanted>
  std::vector<RequestPtr> liveRequests(Wanted wanted) const;
  void throwIfAborted() const;

  std::shared_ptr<Bootstrap> bootstrap_;
  std::shared_ptr<ucx::Engine> engine_;
  const int rank_;
  const int size_;
  const uint32_t groupId_;
  const std::string name_;

  mutable std::mutex mutex_;
  std::vector<int> endpoints_;                   // by peer rank; -1 until first used
  std::vector<std::vector<uint8_t>> addresses_;  // by peer rank, once learned; empty before
  // By peer rank, for receives before any send: what endpointToWatch found (-1: none), kNotLooked before.
  static constexpr int kNotLooked = -2;
  std::vector<int> watchEndpoints_;
  std::vector<std::weak_ptr<ucx::Request>> live_;
  size_t liveCompactAt_ = 64;
  std::string abortReason_;
  PeerWatch peerWatch_;
  std::shared_ptr<char> scratch_;
  size_t scratchBytes_ = 0;
  const std::vector<int> names_;
};

}  // namespace hier::transport
