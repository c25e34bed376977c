#include "transport/shm/node_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "transport/error.h"
#include "transport/log.h"
#include "transport/settings.h"

namespace hier::transport::shm {
namespace {

// A segment: the control block (one cache line per counter), the boards, then the slots.
constexpr size_t kControlBytes = 4096;
constexpr size_t kBoardsBytes = NodeArena::kBoards * NodeArena::kBoardBytes;

// Reads what rank `from` published, or fails the way a collective does when a rank does not come.
std::string awaitKey(Bootstrap& bootstrap, const std::string& key, int from, const Deadline& deadline,
                     const std::vector<int>& names) {
  const int name = names.empty() ? from : names[size_t(from)];
  try {
    auto value = bootstrap.get(key, deadline.remaining());
    return std::string(value.begin(), value.end());
  } catch (const Error& error) {
    if (error.kind() != ErrorKind::Timeout) throw;
    throw Error(ErrorKind::Timeout,
                "timed out after " + std::to_string(deadline.timeout.count()) + " ms waiting for rank " +
                    std::to_string(name) + " (setting up shared memory)",
                {name});
  }
}

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

NodeArena::NodeArena(int rank, int size, size_t slotBytes)
    : rank_(rank), size_(size), slotBytes_(slotBytes), segments_(size_t(size), nullptr), spin_(settings().spin) {}

NodeArena::~NodeArena() {
  for (char* segment : segments_) {
    if (segment != nullptr) munmap(segment, segmentBytes_);
  }
}

std::unique_ptr<NodeArena> NodeArena::create(Bootstrap& bootstrap, int rank, int size, size_t slotBytes,
                                             const Deadline& deadline, const std::vector<int>& names) {
  std::unique_ptr<NodeArena> arena(new NodeArena(rank, size, slotBytes));
  arena->names_ = names;
  arena->segmentBytes_ = kControlBytes + kBoardsBytes + kSlots * slotBytes;

  // Segment names are unique to this communicator: rank 0 draws a token for them.
  if (rank == 0) {
    std::random_device random;
    std::string token = std::to_string(getpid()) + "-" + std::to_string(random()) + std::to_string(random());
    bootstrap.set("hier/shm/token", bytes(token));
  }
  const std::string token = awaitKey(bootstrap, "hier/shm/token", 0, deadline, names);
  auto nameOf = [&](int r) { return "/hier-" + token + "-" + std::to_string(r); };

  // Create this rank's segment; say whether that worked. Its name goes when this function returns, however
  // it returns: by then everyone that will ever open the segment has, and a failed setup (a peer that
  // never came, a deadline) leaves no file behind in /dev/shm either.
  struct UnlinkOnReturn {
    std::string name;
    ~UnlinkOnReturn() {
      if (!name.empty()) shm_unlink(name.c_str());
    }
  } created;
  std::string failure;
  int fd = shm_open(nameOf(rank).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    failure = std::string("shm_open: ") + std::strerror(errno);
  } else {
    created.name = nameOf(rank);
    // Allocated now, not only sized: a sparse segment on a full /dev/shm (a container's 64 MiB) would
    // kill the process with SIGBUS at its first touch of a missing page, where this fails cleanly and
    // the group stays with UCX.
    if (int error = posix_fallocate(fd, 0, off_t(arena->segmentBytes_)); error != 0) {
      failure = std::string("reserving ") + std::to_string(arena->segmentBytes_ >> 10) + " KiB in /dev/shm: " +
                std::strerror(error);
    } else {
      void* memory = mmap(nullptr, arena->segmentBytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (memory == MAP_FAILED) failure = std::string("mmap: ") + std::strerror(errno);
      else arena->segments_[size_t(rank)] = static_cast<char*>(memory);
    }
    close(fd);
  }
  bootstrap.set("hier/shm/created/" + std::to_string(rank), bytes(failure.empty() ? "ok" : failure));

  // Every rank learns every other's outcome, so all of them take the same path.
  std::string firstFailure;
  for (int r = 0; r < size; ++r) {
    auto outcome = awaitKey(bootstrap, "hier/shm/created/" + std::to_string(r), r, deadline, names);
    if (outcome != "ok" && firstFailure.empty()) firstFailure = "rank " + std::to_string(r) + ": " + outcome;
  }
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
      if (memory == MAP_FAILED) firstFailure = std::string("mmap of a peer's segment: ") + std::strerror(errno);
      else arena->segments_[size_t(r)] = static_cast<char*>(memory);
    }
  }
  bootstrap.set("hier/shm/mapped/" + std::to_string(rank), bytes(firstFailure.empty() ? "ok" : firstFailure));
  bool everyoneMapped = true;
  for (int r = 0; r < size; ++r) {
    auto outcome = awaitKey(bootstrap, "hier/shm/mapped/" + std::to_string(r), r, deadline, names);
    if (outcome != "ok") {
      everyoneMapped = false;
      if (firstFailure.empty()) firstFailure = "rank " + std::to_string(r) + ": " + outcome;
    }
  }
  if (!everyoneMapped) {
    log(LogLevel::Warning, "shared memory between the ranks of this host is unavailable (" + firstFailure +
                               "); collectives among them go through UCX instead");
    return nullptr;
  }
  return arena;
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
  if (counter(rank, which).waitFor(value, deadline.when, abandoned_, spin_)) return;
  if (abandoned_.load()) {
    std::lock_guard<std::mutex> lock(abandonMutex_);
    throw Error(ErrorKind::Aborted, abandonReason_);
  }
  const int name = names_.empty() ? rank : names_[size_t(rank)];
  throw Error(ErrorKind::Timeout,
              "timed out after " + std::to_string(deadline.timeout.count()) + " ms waiting for rank " +
                  std::to_string(name) + " (in shared memory)",
              {name});
}

void NodeArena::waitAll(Counter which, uint32_t value, const Deadline& deadline) const {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) waitOne(r, which, value, deadline);
  }
}

}  // namespace hier::transport::shm
