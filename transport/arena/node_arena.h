// The shared memory through which the ranks of one communicator, all on one host, run large
// collectives: per rank, a control block of counters and two slots to stage data in.
//
// Why not UCX here: within a host UCX moves large messages with CMA (process_vm_readv), which pins and
// copies page by page from DRAM at about half of memcpy's speed on the build machines, and every
// message carries matching and rendezvous overhead. Through the arena, a collective reads the user's
// buffer once and writes it once, everything in between stays in the cache, and ranks synchronise
// on counters (futexes, so a waiting rank sleeps).
//
// Each rank's segment also holds two boards, where the ranks agree on each collective before it runs
// (transport/agreement.h): one step through shared memory instead of rounds of messages.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "transport/arena/shared_counter.h"
#include "transport/base/bootstrap.h"
#include "transport/base/deadline.h"
#include "transport/base/store_wait.h"
#include "transport/base/types.h"

namespace hier::transport {

// What an arena's setup finds out about its host and processes (NodeArena's accessors below say what each
// means), which a later arena of the same processes may take instead of finding it out again.
struct HostFacts {
  bool crossMemoryAttach = false;
  bool singleCopyFast = false;
  int usableCpus = 0;  // the CPUs rank 1 may run on; 0 where no copy was timed
  bool operator==(const HostFacts&) const = default;
};

class NodeArena {
 public:
  enum Counter { Posted = 0, Reduced = 1, Released = 2, Agreed = 3 };
  static constexpr int kSlots = 2;
  // A board holds one agreement's record and carried piece (transport/agreement.cpp fills it).
  static constexpr int kBoards = 2;
  static constexpr size_t kBoardBytes = 72 * 1024;

  // Collective over the `size` ranks (all on this host). Returns nullptr on every rank when any rank
  // could not set up shared memory (then the caller stays with UCX); the reason is logged.
  // `names`: how messages name the ranks (empty: by their own numbers). `watch`: what the setup's waits
  // for the other ranks look at besides the deadline (store_wait.h), so that a rank that died or gave up
  // during the setup does not hold the others to it. `known`: what an earlier arena of these processes
  // found (a parent group's), taken when every rank brings the same, found out again otherwise.
  static std::unique_ptr<NodeArena> create(Bootstrap& bootstrap, int rank, int size, size_t slotBytes,
                                           const Deadline& deadline, const std::vector<int>& names = {},
                                           const PeerWatch& watch = {},
                                           const std::optional<HostFacts>& known = std::nullopt);
  ~NodeArena();
  NodeArena(const NodeArena&) = delete;
  NodeArena& operator=(const NodeArena&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slotBytes() const { return slotBytes_; }
  char* slot(int rank, uint64_t chunk) const;
  SharedCounter& counter(int rank, Counter which) const;
  char* board(int rank, uint64_t agreement) const;

  // Chunks are numbered across operations; every rank numbers the same chunks the same way. After
  // chunk g, a rank's counters hold g + 1 (modulo 2^32).
  uint64_t nextChunk() const { return nextChunk_; }
  void consumeChunks(uint64_t count) { nextChunk_ += count; }
  // Agreements are numbered the same way, apart from chunks: agreement a posts Agreed = a + 1.
  uint64_t takeAgreement() { return nextAgreement_++; }

  void post(Counter which, uint32_t value) { counter(rank_, which).post(value); }

  // Cross-memory attach (process_vm_readv): whether this rank may read every peer's memory, decided at
  // setup alike on every rank (false on every rank when any one of them could not: Yama's ptrace_scope 1
  // or more, a seccomp filter, another user).
  bool crossMemoryAttach() const { return crossMemoryAttach_; }
  // Whether, on this machine, one copy with process_vm_readv moved a part between two ranks in at most
  // twice the time of two through a slot (into it, then out of it on another core), as timed when the
  // arena was set up (see timeSingleCopy): the same on every rank. Which way wins depends on the machine
  // (docs/algorithms.md), so the default rule asks this instead of holding a fixed choice. False
  // without cross-memory attach.
  bool singleCopyFast() const { return singleCopyFast_; }
  // Whether every rank of the arena may have a CPU of its own: no more ranks than CPUs rank 1 may run on,
  // as seen at the same time, the same on every rank. Where ranks share cores, a single-copy broadcast or
  // allgather, whose ranks each wait until every peer has read their buffer, lost to the slots.
  bool coreForEachRank() const { return coreForEachRank_; }
  HostFacts facts() const { return {crossMemoryAttach_, singleCopyFast_, usableCpus_}; }
  // Where this rank's data for the running collective lies in its own address space, for peers to read
  // with readFrom() once it posted. A rank republishes only after every peer released what it read.
  void publish(const void* data, size_t bytes);
  // Copies what `rank` published into `into`, which must hold `bytes` (the caller knows, from its own
  // arguments, how much `rank` published: a peer that published another size is an Error(Mismatch)).
  void readFrom(int rank, void* into, size_t bytes) const;
  // A part of what `rank` published as `whole` bytes, [offset, offset + bytes): readPartFrom copies it into
  // `into`, writeInto overwrites it with `from` (process_vm_writev), for ranks that split one transfer
  // between the rank that holds the data and the one it is for. A peer that published another size is an
  // Error(Mismatch), as for readFrom.
  void readPartFrom(int rank, size_t offset, void* into, size_t bytes, size_t whole) const;
  void writeInto(int rank, size_t offset, const void* from, size_t bytes, size_t whole) const;
  // The same for a rank with one part for each peer (all-to-all, scatter's root): where each lies, written
  // at the start of this rank's slot of chunk `g` (16 bytes a part), which the caller must have free, as
  // for data. requirePartTable throws Error(InvalidUsage), naming HIER_SHM_SLOT_BYTES, where `parts` do
  // not fit: every rank calls it before it waits on anyone, so that all refuse alike. readPart copies part
  // `part` of what `rank` published for chunk `g` into `into`, which must hold `bytes`.
  void requirePartTable(size_t parts) const;
  void publishParts(uint64_t g, const std::vector<Buffer>& parts);
  void readPart(int rank, uint64_t g, int part, void* into, size_t bytes) const;
  // The other way: overwrites part `part` of what `rank` published for chunk `g` with `from`
  // (process_vm_writev), for a rank that gathers its peers' parts.
  void writePart(int rank, uint64_t g, int part, const void* from, size_t bytes) const;
  // Waits until every other rank's `which` counter reached `value`, within the collective's deadline;
  // throws Error(Timeout) naming a rank that did not, or Error(Aborted) once abandon() was called.
  void waitAll(Counter which, uint32_t value, const Deadline& deadline) const;
  void waitOne(int rank, Counter which, uint32_t value, const Deadline& deadline) const;
  // Whether `rank`'s process has ended (died, or exited without coming to the collective). Known only
  // for a peer in another process of this rank's pid namespace; false where it cannot be known.
  bool processEnded(int rank) const;
  // Makes every waiter of this arena give up (the communicator was aborted) with Error(Aborted, reason)
  // (the first reason given), at once: a rank asleep on a peer's counter is woken, not left to a tick.
  void abandon(const std::string& reason);

 private:
  NodeArena(int rank, int size, size_t slotBytes);
  void watchPeerProcesses();
  void probeCrossMemoryAttach(Bootstrap& bootstrap, const Deadline& deadline, const PeerWatch& watch);
  void timeSingleCopy(Bootstrap& bootstrap, const Deadline& deadline, const PeerWatch& watch);
  // How messages name `rank` (names_, or its own number).
  int nameOf(int rank) const;
  // Waits until `rank`'s `counter` reached `value`, or throws as waitOne says, naming the wait as being
  // `during` something. With `watch`, it waits in ticks and looks at the watch's abort reason between
  // them: the setup's waits, which abandon() cannot reach before the arena exists.
  void awaitCounter(int rank, const SharedCounter& counter, uint32_t value, const Deadline& deadline,
                    const PeerWatch* watch, const char* during) const;
  // Copies `bytes` between `local` and `rank`'s process at `remote` (into it when `write`), in as many
  // calls as the kernel takes.
  void copyWithPeer(int rank, uint64_t remote, void* local, size_t bytes, bool write) const;
  // Where what `rank` published lies, checked to be `whole` bytes long; partAddress: the same for part
  // `part` of its table for chunk `g`.
  uint64_t publishedAddress(int rank, size_t whole) const;
  uint64_t partAddress(int rank, uint64_t g, int part, size_t bytes) const;
  // Throws Error(Mismatch) unless `rank` published `expected` bytes.
  void requirePublished(int rank, uint64_t published, size_t expected) const;

  const int rank_;
  const int size_;
  const size_t slotBytes_;
  size_t segmentBytes_ = 0;
  std::vector<char*> segments_;  // by rank, mapped
  std::vector<int> names_;
  uint64_t nextChunk_ = 0;
  uint64_t nextAgreement_ = 0;
  std::atomic<bool> abandoned_{false};
  std::vector<int64_t> pids_;       // by rank, for readFrom
  std::vector<int> peerProcesses_;  // by rank: what watchProcess gave for each peer's process (a pidfd, or not)
  bool crossMemoryAttach_ = false;
  bool singleCopyFast_ = false;
  bool coreForEachRank_ = false;
  int usableCpus_ = 0;
  mutable std::mutex abandonMutex_;
  std::string abandonReason_;
};

}  // namespace hier::transport
