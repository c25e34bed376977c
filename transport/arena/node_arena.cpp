#include "transport/arena/node_arena.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>

#include "transport/base/error.h"
#include "transport/base/log.h"
#include "transport/base/process_watch.h"
#include "transport/base/settings.h"

namespace hier::transport {
namespace {

// A segment: the control block (one cache line per counter, then who the rank is and what it published),
// the boards, then the slots.
constexpr size_t kControlBytes = 4096;
// The rank's process, and where its own segment lies in it: what a peer reads back through the kernel to
// learn whether cross-memory attach works, and which process it watches (transport/process_watch.h).
struct Identity {
  ProcessIdentity process;
  uint64_t segment;
};

// What the rank published for the running collective (NodeArena::publish).
struct Published {
  uint64_t address;
  uint64_t bytes;
};
// After the collectives' four counters, one for the setup's own hand-offs (timeSingleCopy), and what rank
// 0 hands over with it.
constexpr int kSetupCounter = 4;
struct TimedPart {
  uint64_t copyIn;   // nanoseconds rank 0 took to copy the part into its slot
  uint64_t address;  // where the part lies in rank 0's process
};
constexpr size_t kIdentityOffset = 5 * sizeof(SharedCounter);
constexpr size_t kPublishedOffset = kIdentityOffset + 64;
constexpr size_t kTimedPartOffset = kPublishedOffset + 64;
static_assert(kTimedPartOffset + sizeof(TimedPart) <= kControlBytes);
constexpr size_t kBoardsBytes = NodeArena::kBoards * NodeArena::kBoardBytes;

// The identity a rank wrote in its segment.
Identity identityIn(const char* segment) {
  Identity identity{};
  std::memcpy(&identity, segment + kIdentityOffset, sizeof identity);
  return identity;
}

// Reads what rank `from` published, or fails the way a collective does when a rank does not come.
std::string awaitKey(Bootstrap& bootstrap, const std::string& key, int from, const Deadline& deadline,
                     const std::vector<int>& names, const PeerWatch& watch) {
  const int name = names.empty() ? from : names[size_t(from)];
  const auto value = awaitPublished(bootstrap, key, from, name, deadline, watch, " (setting up shared memory)");
  return std::string(value.begin(), value.end());
}

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// The middle value (the upper one of an even count).
uint64_t median(std::vector<uint64_t> values) {
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(values.size() / 2), values.end());
  return values[values.size() / 2];
}

// A step of the setup that every rank takes alike: publishes this rank's outcome of it ("ok", or "ok "
// and what the rank knows, or what failed) under `step` and returns the first failure among every
// rank's, as "rank r: what" ("" when every one is ok), having read them all. `alike`, where given, tells
// whether every rank published the same.
std::string firstFailureAmong(Bootstrap& bootstrap, const std::string& step, const std::string& outcome, int rank,
                              int size, const Deadline& deadline, const std::vector<int>& names, const PeerWatch& watch,
                              bool* alike = nullptr) {
  bootstrap.set(step + std::to_string(rank), bytes(outcome));
  std::string firstFailure;
  if (alike != nullptr) *alike = true;
  for (int r = 0; r < size; ++r) {
    auto theirs = awaitKey(bootstrap, step + std::to_string(r), r, deadline, names, watch);
    if (alike != nullptr && theirs != outcome) *alike = false;
    const bool ok = theirs == "ok" || theirs.starts_with("ok ");
    if (!ok && firstFailure.empty()) firstFailure = "rank " + std::to_string(r) + ": " + theirs;
  }
  return firstFailure;
}

std::string encodeFacts(const HostFacts& facts) {
  return std::to_string(int(facts.crossMemoryAttach)) + " " + std::to_string(int(facts.singleCopyFast)) + " " +
         std::to_string(facts.usableCpus);
}

}  // namespace

NodeArena::NodeArena(int rank, int size, size_t slotBytes)
    : rank_(rank), size_(size), slotBytes_(slotBytes), segments_(size_t(size), nullptr) {}

NodeArena::~NodeArena() {
  for (char* segment : segments_) {
    if (segment != nullptr) munmap(segment, segmentBytes_);
  }
  for (int pidfd : peerProcesses_) {
    if (pidfd >= 0) close(pidfd);
  }
}

std::unique_ptr<NodeArena> NodeArena::create(Bootstrap& bootstrap, int rank, int size, size_t slotBytes,
                                             const Deadline& deadline, const std::vector<int>& names,
                                             const PeerWatch& watch, const std::optional<HostFacts>& known) {
  std::unique_ptr<NodeArena> arena(new NodeArena(rank, size, slotBytes));
  arena->names_ = names;
  arena->segmentBytes_ = kControlBytes + kBoardsBytes + kSlots * slotBytes;

  // Segment names are unique to this communicator: rank 0 draws a token for them.
  if (rank == 0) {
    std::random_device random;
    std::string token = std::to_string(getpid()) + "-" + std::to_string(random()) + std::to_string(random());
    bootstrap.set("hier/shm/token", bytes(token));
  }
  const std::string token = awaitKey(bootstrap, "hier/shm/token", 0, deadline, names, watch);
  auto nameOf = [&](int r) { return "/hier-" + token + "-" + std::to_string(r); };

  // The segments' names go when this function returns, however it returns: by then everyone that will
  // ever open a segment has, and a failed setup (a peer that never came, a deadline) leaves no file behind
  // in /dev/shm either. Each rank unlinks every rank's name, not only its own: a peer killed during the
  // setup runs no destructor, and its segment would stay in /dev/shm until the host reboots
  // (tests/multinode/test_peer_death.py saw one). Unlinking a name that is gone already does nothing.
  struct UnlinkOnReturn {
    std::vector<std::string> names;
    ~UnlinkOnReturn() {
      for (const auto& name : names) shm_unlink(name.c_str());
    }
  } segmentNames;
  for (int r = 0; r < size; ++r) segmentNames.names.push_back(nameOf(r));

  // Create this rank's segment; say whether that worked.
  std::string failure;
  int fd = shm_open(nameOf(rank).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    failure = std::string("shm_open: ") + std::strerror(errno);
  } else {
    // Allocated now, not only sized: a sparse segment on a full /dev/shm (a container's 64 MiB) would
    // kill the process with SIGBUS at its first touch of a missing page, where this fails cleanly and
    // the group stays with UCX.
    if (int error = posix_fallocate(fd, 0, off_t(arena->segmentBytes_)); error != 0) {
      failure = std::string("reserving ") + std::to_string(arena->segmentBytes_ >> 10) +
                " KiB in /dev/shm: " + std::strerror(error);
    } else {
      void* memory = mmap(nullptr, arena->segmentBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (memory == MAP_FAILED) {
        failure = std::string("mmap: ") + std::strerror(errno);
      } else {
        arena->segments_[size_t(rank)] = static_cast<char*>(memory);
        const Identity identity{thisProcess(), reinterpret_cast<uint64_t>(memory)};
        std::memcpy(static_cast<char*>(memory) + kIdentityOffset, &identity, sizeof identity);
      }
    }
    close(fd);
  }
  // Every rank learns every other's outcome, so all of them take the same path.
  std::string firstFailure = firstFailureAmong(bootstrap, "hier/shm/created/", failure.empty() ? "ok" : failure, rank,
                                               size, deadline, names, watch);
  if (firstFailure.empty()) {
    for (int r = 0; r < size && firstFailure.empty(); ++r) {
      if (r == rank) continue;
      int peer = shm_open(nameOf(r).c_str(), O_RDWR, 0600);
      if (peer < 0) {
        firstFailure = "opening rank " + std::to_string(r) + "'s segment: " + std::strerror(errno);
        break;
      }
      void* memory = mmap(nullptr, arena->segmentBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, peer, 0);
      close(peer);
      if (memory == MAP_FAILED)
        firstFailure = std::string("mmap of a peer's segment: ") + std::strerror(errno);
      else
        arena->segments_[size_t(r)] = static_cast<char*>(memory);
    }
  }
  // What the ranks knew of the host before (a parent group's arena) rides in this step: taken when all
  // of them bring the same, so that all take the same path; the probe and the copy timing otherwise.
  const std::string mapped = !firstFailure.empty() ? firstFailure : known ? "ok " + encodeFacts(*known) : "ok";
  bool alike = false;
  const std::string mapFailure =
      firstFailureAmong(bootstrap, "hier/shm/mapped/", mapped, rank, size, deadline, names, watch, &alike);
  if (!mapFailure.empty()) {
    if (firstFailure.empty()) firstFailure = mapFailure;
    log(LogLevel::Warning, "shared memory between the ranks of this host is unavailable (" + firstFailure +
                               "); collectives among them go through UCX instead");
    return nullptr;
  }
  arena->watchPeerProcesses();
  for (int r = 0; r < size; ++r) arena->pids_.push_back(identityIn(arena->segments_[size_t(r)]).process.pid);
  if (known && alike) {
    arena->crossMemoryAttach_ = known->crossMemoryAttach;
    arena->singleCopyFast_ = known->singleCopyFast;
    arena->usableCpus_ = known->usableCpus;
    arena->coreForEachRank_ = known->crossMemoryAttach && size <= known->usableCpus;
    return arena;
  }
  arena->probeCrossMemoryAttach(bootstrap, deadline, watch);
  if (arena->crossMemoryAttach_ && size > 1) arena->timeSingleCopy(bootstrap, deadline, watch);
  return arena;
}

void NodeArena::watchPeerProcesses() {
  // A peer whose process ends posts nothing more, and nothing else tells the ranks of one host of it: a
  // pidfd of each peer's process lets a waiter learn it within a tick of its wait
  // (SharedCounter::waitFor). Where there is none (transport/process_watch.h), the deadline still ends
  // the wait.
  peerProcesses_.assign(size_t(size_), -1);
  for (int r = 0; r < size_; ++r) {
    const Identity theirs = identityIn(segments_[size_t(r)]);
    if (r != rank_) peerProcesses_[size_t(r)] = watchProcess(theirs.process);
  }
}

bool NodeArena::processEnded(int rank) const { return transport::processEnded(peerProcesses_[size_t(rank)]); }

void NodeArena::probeCrossMemoryAttach(Bootstrap& bootstrap, const Deadline& deadline, const PeerWatch& watch) {
  // Each rank reads every peer's identity through the kernel, as readFrom will read their data, and
  // checks it against what the peer wrote in its segment: a pid that names another process (ranks in
  // different pid namespaces) reads something else or nothing.
  std::string outcome = "ok";
  for (int r = 0; r < size_ && outcome == "ok"; ++r) {
    if (r == rank_) continue;
    const Identity identity = identityIn(segments_[size_t(r)]);
    Identity seen{};
    iovec local{&seen, sizeof seen};
    iovec remote{reinterpret_cast<void*>(identity.segment + kIdentityOffset), sizeof seen};
    const ssize_t got = process_vm_readv(pid_t(identity.process.pid), &local, 1, &remote, 1, 0);
    if (got != ssize_t(sizeof seen)) {
      outcome = "reading rank " + std::to_string(r) + ": " + (got < 0 ? std::strerror(errno) : "a short read");
    } else if (seen.process.pid != identity.process.pid || seen.segment != identity.segment) {
      outcome = "rank " + std::to_string(r) + "'s process id names another process here";
    }
  }
  const std::string firstFailure =
      firstFailureAmong(bootstrap, "hier/shm/cma/", outcome, rank_, size_, deadline, names_, watch);
  crossMemoryAttach_ = firstFailure.empty();
  if (!crossMemoryAttach_ && rank_ == 0) {
    log(LogLevel::Info, "cross-memory attach between the ranks of this host is unavailable (" + firstFailure +
                            "); the single_copy algorithms do not apply");
  }
}

void NodeArena::timeSingleCopy(Bootstrap& bootstrap, const Deadline& deadline, const PeerWatch& watch) {
  // Ranks 0 and 1 move a part from 0 to 1 each way (one copy, two), kRounds times, and take the median
  // time of each; every rank takes rank 1's verdict, so all choose alike. The part is what a collective's
  // input usually is, just written by its owner: its lines sit modified in the owner's cache, where the
  // reader must fetch them from. The two hand each round over through their segments' setup counters
  // (through the store, each hand-off took a millisecond or more, 16 rounds most of a group's first
  // operation); the hand-offs are not timed.
  using Clock = std::chrono::steady_clock;
  auto nanoseconds = [](Clock::duration d) {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  };
  // Medians of 16: with the best of 6, the verdict changed from one run to the next on one VM (a quarter of
  // the jobs took two copies there, 3 of 12 starts of process_group_bench).
  constexpr int kRounds = 16;
  const size_t partBytes = std::min<size_t>(256 * 1024, slotBytes_);
  const std::string step = "hier/shm/single_copy/";
  auto setupCounter = [&](int rank) -> SharedCounter& {
    return reinterpret_cast<SharedCounter*>(segments_[size_t(rank)])[kSetupCounter];
  };
  auto awaitRound = [&](int rank, int round) {
    awaitCounter(rank, setupCounter(rank), uint32_t(round + 1), deadline, &watch, "setting up shared memory");
  };
  if (rank_ == 0) {
    // Slot 0 of chunk 0 is free: no collective ran yet.
    std::vector<char> part(partBytes);
    for (int round = 0; round < kRounds; ++round) {
      std::memset(part.data(), round, partBytes);
      const auto start = Clock::now();
      std::memcpy(slot(0, 0), part.data(), partBytes);
      const uint64_t copyIn = nanoseconds(Clock::now() - start);
      std::memset(part.data(), round + 1, partBytes);
      const TimedPart timed{copyIn, reinterpret_cast<uint64_t>(part.data())};
      std::memcpy(segments_[0] + kTimedPartOffset, &timed, sizeof timed);
      setupCounter(0).post(uint32_t(round + 1));
      awaitRound(1, round);
    }
  } else if (rank_ == 1) {
    std::vector<char> into(partBytes);
    std::vector<uint64_t> ones, ins, outs, twos;
    bool failed = false;
    for (int round = 0; round < kRounds; ++round) {
      awaitRound(0, round);
      TimedPart timed{};
      std::memcpy(&timed, segments_[0] + kTimedPartOffset, sizeof timed);
      const uint64_t copyIn = timed.copyIn, address = timed.address;
      auto start = Clock::now();
      std::memcpy(into.data(), slot(0, 0), partBytes);
      const uint64_t copyOut = nanoseconds(Clock::now() - start);
      start = Clock::now();
      try {
        copyWithPeer(0, address, into.data(), partBytes, /*write=*/false);
      } catch (const Error&) {
        failed = true;  // then the slots stay the default; the collectives' own reads will say what fails
      }
      const uint64_t one = nanoseconds(Clock::now() - start);
      ones.push_back(one);
      ins.push_back(copyIn);
      outs.push_back(copyOut);
      twos.push_back(copyIn + copyOut);
      setupCounter(1).post(uint32_t(round + 1));
    }
    // One copy is taken unless its read takes more than twice the two copies. This timing understates
    // it: inside a collective one copy also saves a hand-off, and its readers copy at once, where through
    // the slots a reader waits for the writer's copy (docs/measurements.md); what this guards against is
    // a machine where the read itself is slow.
    const uint64_t one = median(ones), two = median(twos);
    const bool fast = !failed && one <= 2 * two;
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int usable = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    // The log shows the two medians compared; the medians of the copies in and out need not add up to
    // the second.
    bootstrap.set(step + "verdict", bytes(std::string(fast ? "1" : "0") + " " + std::to_string(one) + " " +
                                          std::to_string(two) + " " + std::to_string(median(ins)) + " " +
                                          std::to_string(median(outs)) + " " + std::to_string(usable)));
  }
  std::istringstream verdict(awaitKey(bootstrap, step + "verdict", 1, deadline, names_, watch));
  int fast = 0, usable = 0;
  uint64_t one = 0, two = 0, in = 0, out = 0;
  verdict >> fast >> one >> two >> in >> out >> usable;
  singleCopyFast_ = fast == 1;
  usableCpus_ = usable;
  coreForEachRank_ = size_ <= usable;
  if (rank_ == 0) {
    auto us = [](uint64_t ns) { return std::to_string(ns / 1000) + "." + std::to_string(ns / 100 % 10) + " us"; };
    log(LogLevel::Info, std::to_string(partBytes >> 10) + " KiB between two ranks of this host, medians of " +
                            std::to_string(kRounds) + ": " + us(one) + " read with process_vm_readv, " + us(two) +
                            " through a slot (" + us(in) + " in, " + us(out) +
                            " out): " + (singleCopyFast_ ? "one copy" : "two copies") + " taken; " +
                            std::to_string(size_) + " ranks on " + std::to_string(usable) + " CPUs");
  }
}

void NodeArena::publish(const void* data, size_t bytes) {
  const Published published{reinterpret_cast<uint64_t>(data), bytes};
  std::memcpy(segments_[size_t(rank_)] + kPublishedOffset, &published, sizeof published);
}

void NodeArena::readFrom(int rank, void* into, size_t bytes) const {
  copyWithPeer(rank, publishedAddress(rank, bytes), into, bytes, /*write=*/false);
}

void NodeArena::requirePartTable(size_t parts) const {
  if (parts * sizeof(Published) > slotBytes_) {
    throw Error(ErrorKind::InvalidUsage, "where " + std::to_string(parts) + " parts lie takes " +
                                             std::to_string(parts * sizeof(Published)) +
                                             " bytes, more than a slot of " + std::to_string(slotBytes_) +
                                             "; raise HIER_SHM_SLOT_BYTES or choose another algorithm");
  }
}

void NodeArena::publishParts(uint64_t g, const std::vector<Buffer>& parts) {
  requirePartTable(parts.size());
  auto* table = reinterpret_cast<Published*>(slot(rank_, g));
  for (size_t i = 0; i < parts.size(); ++i) table[i] = {reinterpret_cast<uint64_t>(parts[i].data), parts[i].bytes()};
}

void NodeArena::readPart(int rank, uint64_t g, int part, void* into, size_t bytes) const {
  copyWithPeer(rank, partAddress(rank, g, part, bytes), into, bytes, /*write=*/false);
}

uint64_t NodeArena::partAddress(int rank, uint64_t g, int part, size_t bytes) const {
  Published published{};
  std::memcpy(&published, slot(rank, g) + size_t(part) * sizeof published, sizeof published);
  requirePublished(rank, published.bytes, bytes);
  return published.address;
}

void NodeArena::requirePublished(int rank, uint64_t published, size_t expected) const {
  if (published == expected) return;
  const int name = nameOf(rank);
  throw Error(ErrorKind::Mismatch,
              "rank " + std::to_string(name) + " published " + std::to_string(published) +
                  " bytes where this rank expects " + std::to_string(expected),
              {name});
}

void NodeArena::writePart(int rank, uint64_t g, int part, const void* from, size_t bytes) const {
  copyWithPeer(rank, partAddress(rank, g, part, bytes), const_cast<void*>(from), bytes, /*write=*/true);
}

int NodeArena::nameOf(int rank) const { return names_.empty() ? rank : names_[size_t(rank)]; }

uint64_t NodeArena::publishedAddress(int rank, size_t whole) const {
  Published published{};
  std::memcpy(&published, segments_[size_t(rank)] + kPublishedOffset, sizeof published);
  requirePublished(rank, published.bytes, whole);
  return published.address;
}

void NodeArena::readPartFrom(int rank, size_t offset, void* into, size_t bytes, size_t whole) const {
  copyWithPeer(rank, publishedAddress(rank, whole) + offset, into, bytes, /*write=*/false);
}

void NodeArena::writeInto(int rank, size_t offset, const void* from, size_t bytes, size_t whole) const {
  copyWithPeer(rank, publishedAddress(rank, whole) + offset, const_cast<void*>(from), bytes, /*write=*/true);
}

void NodeArena::copyWithPeer(int rank, uint64_t remote, void* local, size_t bytes, bool write) const {
  for (size_t done = 0; done < bytes;) {
    iovec mine{static_cast<char*>(local) + done, bytes - done};
    iovec theirs{reinterpret_cast<void*>(remote + done), bytes - done};
    const pid_t pid = pid_t(pids_[size_t(rank)]);
    const ssize_t moved =
        write ? process_vm_writev(pid, &mine, 1, &theirs, 1, 0) : process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (moved <= 0) {
      const int name = nameOf(rank);
      throw Error(ErrorKind::PeerFailure,
                  std::string(write ? "writing into" : "reading") + " rank " + std::to_string(name) + "'s buffer (" +
                      (write ? "process_vm_writev" : "process_vm_readv") +
                      "): " + (moved < 0 ? std::strerror(errno) : "nothing moved"),
                  {name});
    }
    done += size_t(moved);
  }
}

char* NodeArena::slot(int rank, uint64_t chunk) const {
  return segments_[size_t(rank)] + kControlBytes + kBoardsBytes + (chunk % kSlots) * slotBytes_;
}

char* NodeArena::board(int rank, uint64_t agreement) const {
  return segments_[size_t(rank)] + kControlBytes + (agreement % kBoards) * kBoardBytes;
}

SharedCounter& NodeArena::counter(int rank, Counter which) const {
  return reinterpret_cast<SharedCounter*>(segments_[size_t(rank)])[which];
}

void NodeArena::abandon(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abandonMutex_);
    if (abandonReason_.empty()) abandonReason_ = reason.empty() ? "the communicator was aborted" : reason;
  }
  abandoned_.store(true);
  for (int r = 0; r < size_; ++r) {
    for (Counter which : {Posted, Reduced, Released, Agreed}) counter(r, which).wake();
  }
}

void NodeArena::waitOne(int rank, Counter which, uint32_t value, const Deadline& deadline) const {
  awaitCounter(rank, counter(rank, which), value, deadline, nullptr, "in shared memory");
}

void NodeArena::awaitCounter(int rank, const SharedCounter& counter, uint32_t value, const Deadline& deadline,
                             const PeerWatch* watch, const char* during) const {
  const bool sliced = watch != nullptr && watch->abortReason;
  // The setup's waits (those with a watch) do not teach the spin budget: it is for the collectives' wake-ups.
  const bool learn = watch == nullptr && coreForEachRank_;
  for (;;) {
    auto until = deadline.when;
    if (sliced && until - Clock::now() > settings().progressTick) until = Clock::now() + settings().progressTick;
    if (counter.waitFor(value, until, abandoned_, learn, peerProcesses_[size_t(rank)])) return;
    if (abandoned_.load()) {
      std::lock_guard<std::mutex> lock(abandonMutex_);
      throw Error(ErrorKind::Aborted, abandonReason_);
    }
    if (sliced) {
      if (std::string why = watch->abortReason(); !why.empty()) throw Error(ErrorKind::Aborted, why);
    }
    const int name = nameOf(rank);
    if (processEnded(rank)) {
      throw Error(ErrorKind::PeerFailure,
                  "rank " + std::to_string(name) + "'s process ended while this rank waited for it (" + during + ")",
                  {name});
    }
    if (!sliced || deadline.passed()) {
      throw Error(ErrorKind::Timeout,
                  deadline.timedOut() + " waiting for rank " + std::to_string(name) + " (" + during + ")", {name});
    }
  }
}

void NodeArena::waitAll(Counter which, uint32_t value, const Deadline& deadline) const {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) waitOne(r, which, value, deadline);
  }
}

}  // namespace hier::transport
