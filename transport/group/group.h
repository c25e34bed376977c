// What collectives run on: a communicator, and what they learn about its ranks on first use.
//
//   topology   which ranks share a host: the ranks exchange their host identities and UCX addresses
//              (record_exchange.h), so that later connections need no store; a sub-group is told its
//              members' by its parent, and a group told to learn from another (learnFrom) takes them
//              from that one
//   arena      the shared memory of the ranks, when all of them are on this host
//   node       the ranks of this rank's host; rail: the ranks with this rank's place on every host;
//   rail       leaders: the first rank of every host. Sub-groups for the hierarchical schedules, made
//   leaders    only when the ranks span hosts.
//
// Each is a collective step of the ranks it concerns, made once, by whichever thread asks first (the
// group's executor, a schedule's network thread and the CUDA path may all ask). Sub-groups are groups of
// their own: a node group has its own arena; a rail spans hosts and has none.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "transport/arena/node_arena.h"
#include "transport/base/bootstrap.h"
#include "transport/base/deadline.h"
#include "transport/group/communicator.h"
#include "transport/group/record_exchange.h"
#include "transport/topology/topology.h"
#include "transport/ucx/engine.h"

namespace hier::transport {

class Group {
 public:
  // The arguments are the communicator's (communicator.h); its messages go through the UCX engine of
  // `engineScope` (ucx::Engine::acquire: "" for the process's, one of its own for a thread acting as a
  // rank).
  Group(std::shared_ptr<Bootstrap> bootstrap, int rank, int size, uint32_t groupId, std::string name,
        const std::string& engineScope = "");
  // Sub-groups go first: they share the communicator's engine.
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  Communicator& communicator() { return communicator_; }
  const Communicator& communicator() const { return communicator_; }
  int rank() const { return communicator_.rank(); }
  int size() const { return communicator_.size(); }
  const std::string& name() const { return communicator_.name(); }

  const Topology& topology(const Deadline& deadline);
  // Before this group's first topology(): its ranks are ranks `members` of `source`, a group over the
  // same processes and UCX engine, whose records it waits for and takes (no exchange of its own), and
  // whose arenas' host facts its own arenas bring to their setup while `source` lives
  // (NodeArena::create). The caller guarantees what makes that safe: every rank of this group calls it
  // alike, and every rank of `source` has an operation coming that learns its topology, whether or not
  // it is in this group. Ignored where `source` runs over another engine.
  void learnFrom(std::shared_ptr<Group> source, std::vector<int> members);
  // Null when the ranks span hosts, when there is one rank, or when shared memory is unavailable (then
  // everything goes through UCX).
  NodeArena* arena(const Deadline& deadline);
  // The arena if arena() has set it up already; null otherwise. Never waits.
  NodeArena* arenaIfReady() const;
  Group& node(const Deadline& deadline);
  Group& rail(const Deadline& deadline);
  // Null on ranks that are not the first of their host.
  Group* leaders(const Deadline& deadline);
  // What collectives set up on first use, now: the records, the arena, and where the ranks span hosts
  // the sub-groups and each host's arena. Collective: every rank calls it, at the same point of its
  // calls on this group (an arena set up changes how the next collective's ranks agree).
  void prepare(const Deadline& deadline);

  // Failure notices: a rank whose operation failed tells the others at once, so that they stop waiting
  // for it instead of waiting out their deadlines. Messages of a tag space no collective uses (the
  // point-to-point space of the node sub-group's id, which does no point-to-point).
  //   tell    sends `text` (cut to kNoticeBytes - 1) to every other rank; best effort, waits for nothing.
  //   listen  posts one receive for the next notice from any rank; `hook` gets it (the sender and the
  //           text) on the messaging thread, so it must hand off, and call listen() again to hear more.
  //           A notice never comes once the group is aborted.
  static constexpr size_t kNoticeBytes = 1024;
  void tell(const std::string& text, const Deadline& deadline);
  void listen(std::function<void(int from, const std::string& text)> hook);

  // c10d's monitored barrier, as Gloo keeps it: every other rank checks in with rank 0, which answers
  // them all once all came. Its messages have a tag space of their own (beside the notices'), outside
  // every collective's numbering, so a rank that never came leaves the collectives in step.
  //   rank 0  returns the ranks that did not check in by the deadline (all of them with `waitAll`, else
  //           the first in rank order), and then answers nobody;
  //   others  return {} once rank 0 answered, and throw Error when it did not by the deadline.
  std::vector<int> monitoredBarrier(const Deadline& deadline, bool waitAll);

  // Fails what is in flight on the communicator, its arena and its sub-groups; later posts fail at once.
  void abort(const std::string& reason);
  bool aborted() const { return communicator_.aborted(); }
  // The version of the transport's messaging library (UCX), for diagnostics.
  static std::string messagingVersion() { return ucx::version(); }

  // The sequence number of this group's next collective, when it is a sub-group: every member runs the
  // same collectives on it in the same order, so all count alike. (A top-level group's collectives are
  // numbered by its owner.)
  uint64_t nextSequence() { return sequence_++; }
  // True the first time `what` is asked about: for logging a choice once per group.
  bool firstUse(const std::string& what);

 private:
  // A sub-group of `parent`: its members' engine is the parent's; `members` are its ranks as the
  // parent's, `names` as messages name them.
  Group(std::shared_ptr<Bootstrap> bootstrap, int rank, int size, uint32_t groupId, std::string name,
        std::shared_ptr<ucx::Engine> engine, std::vector<int> names, Group* parent, std::vector<int> members,
        std::vector<PeerRecord> directory);
  // What this group's waits for a peer in the store look at besides the deadline (store_wait.h): an
  // abort of this group or one above it, and the peer's process, as the top-level group knows it (a
  // member that died before it made its sub-groups published nothing in them).
  PeerWatch watch();
  std::string abortReasonHereOrAbove() const;
  bool peerProcessEnded(int rank);
  // What an arena of this group, of a group above it or of its source found about this host; none
  // where none was set up yet.
  std::optional<HostFacts> knownHostFacts();
  // This group's records, once topology() learned them, for a group that learns from it; waits until
  // `deadline`, or until this group is aborted or `stopped` (the waiter's) says stop (poll.h).
  const std::vector<PeerRecord>& awaitRecords(const Deadline& deadline, const std::function<bool()>& stopped);
  std::unique_ptr<Group> makeSub(const std::vector<int>& members, uint32_t kind, const std::string& prefix);
  // The sub-group in `slot`, made by `make` the first time.
  Group* sub(std::unique_ptr<Group> Group::*slot, const std::function<std::unique_ptr<Group>()>& make);

  Communicator communicator_;
  Group* const parent_ = nullptr;   // owns this sub-group; null for a top-level group
  const std::vector<int> members_;  // this sub-group's ranks as the parent's

  std::mutex topologyMutex_;  // held while the ranks exchange their records (topology())
  std::atomic<bool> topologyLearned_{false};
  std::unique_ptr<Topology> topology_;
  // Every rank's record, by rank: a sub-group's from its making, a top-level group's from topology().
  std::vector<PeerRecord> directory_;
  // learnFrom's: set before the first topology(); source_ let go once the records came from it.
  std::shared_ptr<Group> source_;
  std::weak_ptr<Group> factsSource_;
  std::vector<int> sourceMembers_;

  // Making an arena or a sub-group waits on peers: one at a time, under buildMutex_. What is made is
  // published under stateMutex_, which abort() takes without waiting for a build.
  std::mutex buildMutex_;
  mutable std::mutex stateMutex_;
  bool arenaDecided_ = false;
  std::unique_ptr<NodeArena> arena_;
  // arena_ once it is made, for arenaIfReady() to read without a lock (every collective asks).
  std::atomic<NodeArena*> arenaReady_{nullptr};
  std::unique_ptr<Group> node_, rail_, leaders_;
  std::set<std::string> announced_;
  std::atomic<uint64_t> sequence_{0};
};

}  // namespace hier::transport
