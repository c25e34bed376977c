#include "transport/agreement/agreement.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>
#include <tuple>

#include "transport/arena/node_arena.h"
#include "transport/base/settings.h"
#include "transport/group/group.h"

namespace hier::transport {
namespace {

// What travels: plain bytes, the same layout on every rank (one build of the library per job).
struct Record {
  CallSignature lowest;
  CallSignature highest;
  int32_t lowestRank;  // -1: no signature seen yet (only refusals)
  int32_t highestRank;
  int32_t refusingRank;  // -1: nobody refused
  int32_t allCarried;    // 1: every rank seen so far carried its piece
  char refusal[400];
};

// A message: the record, then `count` pieces, each a header and its bytes padded to 8.
struct MessageHead {
  Record record;
  uint32_t count;
  uint32_t unused;
};
struct PieceHead {
  int32_t rank;
  uint32_t bytes;
};
constexpr size_t padded(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// The largest message any rank can send to a group of `n`, whatever its HIER_CARRY_BYTES: every
// receive is posted this large, so no message is ever cut short.
size_t messageCapacity(int n) { return sizeof(MessageHead) + size_t(n) * (sizeof(PieceHead) + 8) + kMaxCarryBytes; }

// Packs the record and the first `count` pieces of `held` (ranks, in the order this rank came to hold
// their pieces: its own, then each round's from further below).
size_t pack(char* out, const Record& record, const Carried* carried, const std::vector<int>& held, size_t count) {
  auto* head = reinterpret_cast<MessageHead*>(out);
  head->record = record;
  head->count = uint32_t(count);
  head->unused = 0;
  size_t at = sizeof(MessageHead);
  for (size_t i = 0; i < count; ++i) {
    const std::span<const std::byte> bytes = carried->piece(held[i]);
    PieceHead piece{held[i], uint32_t(bytes.size())};
    std::memcpy(out + at, &piece, sizeof piece);
    at += sizeof piece;
    if (!bytes.empty()) std::memcpy(out + at, bytes.data(), bytes.size());
    at += padded(bytes.size(), 8);
  }
  return at;
}

// What pack() makes of the same.
size_t packedBytes(const std::optional<Carried>& carried, const std::vector<int>& held, size_t count) {
  size_t at = sizeof(MessageHead);
  for (size_t i = 0; i < count; ++i) at += sizeof(PieceHead) + padded(carried->piece(held[i]).size(), 8);
  return at;
}

Record recordOf(int rank, const CallSignature* mine, const std::string& refusal) {
  Record r{};
  r.lowestRank = r.highestRank = r.refusingRank = -1;
  r.allCarried = 0;
  if (mine != nullptr) {
    r.lowest = r.highest = *mine;
    r.lowestRank = r.highestRank = rank;
  } else {
    r.refusingRank = rank;
    std::strncpy(r.refusal, refusal.c_str(), sizeof r.refusal - 1);
  }
  return r;
}

// Folds what `other` saw into `into`. Ties go to the lower rank, so every rank ends with the same record.
void combine(Record& into, const Record& other) {
  if (other.lowestRank >= 0) {
    if (into.lowestRank < 0 || other.lowest < into.lowest ||
        (other.lowest == into.lowest && other.lowestRank < into.lowestRank)) {
      into.lowest = other.lowest;
      into.lowestRank = other.lowestRank;
    }
    if (into.highestRank < 0 || into.highest < other.highest ||
        (other.highest == into.highest && other.highestRank < into.highestRank)) {
      into.highest = other.highest;
      into.highestRank = other.highestRank;
    }
  }
  into.allCarried = into.allCarried && other.allCarried;
  if (other.refusingRank >= 0 && (into.refusingRank < 0 || other.refusingRank < into.refusingRank)) {
    into.refusingRank = other.refusingRank;
    std::memcpy(into.refusal, other.refusal, sizeof into.refusal);
  }
}

template <size_t N>
std::string_view text(const char (&field)[N]) {
  return std::string_view(field, strnlen(field, N));
}

template <size_t N>
void setText(char (&field)[N], std::string_view value) {
  std::memset(field, 0, N);
  std::memcpy(field, value.data(), std::min(value.size(), N - 1));
}

auto key(const CallSignature& s) {
  return std::make_tuple(text(s.op), text(s.dtype), text(s.reduceOp), s.root, s.parts, s.elements, s.layout);
}

}  // namespace

CallSignature::CallSignature(std::string_view op_, std::string_view dtype_, uint64_t elements_, uint32_t parts_)
    : parts(parts_), elements(elements_) {
  setText(op, op_);
  setText(dtype, dtype_);
}

void CallSignature::setReduceOp(std::string_view name) { setText(reduceOp, name); }

bool CallSignature::operator==(const CallSignature& other) const { return key(*this) == key(other); }
bool CallSignature::operator<(const CallSignature& other) const { return key(*this) < key(other); }

std::string CallSignature::describe() const {
  std::string out = std::string(text(op)) + "(";
  if (!text(dtype).empty()) out += std::string(text(dtype)) + ", ";
  if (parts != 1) out += std::to_string(parts) + " tensors, ";
  out += std::to_string(elements) + " elements";
  if (layout != 0) out += ", sizes digest " + std::to_string(layout % 1000000);
  if (!text(reduceOp).empty()) out += ", " + std::string(text(reduceOp));
  if (root >= 0) out += ", root " + std::to_string(root);
  return out + ")";
}

uint64_t digest(uint64_t seed, uint64_t value) {
  for (int byte = 0; byte < 8; ++byte) {
    seed ^= (value >> (8 * byte)) & 0xff;
    seed *= 1099511628211ull;
  }
  return seed;
}

std::string Agreement::describe() const {
  if (refusingRank >= 0) return "rank " + std::to_string(refusingRank) + " refused this call: " + refusal;
  if (first) {
    return "the ranks called different collectives here: rank " + std::to_string(first->rank) + " passed " +
           first->signature.describe() + ", rank " + std::to_string(second->rank) + " passed " +
           second->signature.describe() +
           "; every rank must make the same collective calls, in the same order, with matching arguments";
  }
  return {};
}

namespace {

// HIER_CARRY_BYTES, within what a board and a message hold.
size_t carryBytes() { return std::min(settings().carryBytes, kMaxCarryBytes); }

}  // namespace

size_t carryLimit(int ranks) { return carryBytes() / size_t(std::max(ranks, 1)); }

namespace {

// The largest block a thread let go of, if any. Blocks beyond kLargestSpare (which a group of a
// thousand ranks still fits in: the pieces are within kMaxCarryBytes in all, each padded to 64) go
// back to the heap.
struct SpareBlock {
  std::byte* data = nullptr;
  size_t capacity = 0;
  ~SpareBlock() { std::free(data); }
};
thread_local SpareBlock spare;
constexpr size_t kLargestSpare = 2 * kMaxCarryBytes;

}  // namespace

PieceMemory::PieceMemory(size_t bytes) {
  bytes = padded(std::max<size_t>(bytes, 64), 64);
  if (spare.data != nullptr && spare.capacity >= bytes) {
    data_ = std::exchange(spare.data, nullptr);
    capacity_ = std::exchange(spare.capacity, 0);
    return;
  }
  data_ = static_cast<std::byte*>(std::aligned_alloc(64, bytes));
  if (data_ == nullptr) throw std::bad_alloc();
  capacity_ = bytes;
}

PieceMemory& PieceMemory::operator=(PieceMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void PieceMemory::release() noexcept {
  if (data_ == nullptr) return;
  if (capacity_ <= kLargestSpare && capacity_ > spare.capacity) {
    std::swap(data_, spare.data);
    std::swap(capacity_, spare.capacity);
  }
  std::free(data_);
  data_ = nullptr;
  capacity_ = 0;
}

namespace {

size_t bytesIn(PieceParts parts) {
  size_t bytes = 0;
  for (const auto& part : parts) bytes += part.size();
  return bytes;
}

// Whether this rank, of a group of `ranks`, carries `piece`: only with a signature of its own (a refusing
// rank carries nothing), and only within the limit. `total`: what every rank's pieces come to together in
// a valid call, where the caller knows it; else each piece is held to carryLimit().
bool carries(int ranks, const CallSignature* mine, const std::optional<PieceParts>& piece,
             std::optional<size_t> total) {
  if (mine == nullptr || !piece) return false;
  const size_t bytes = bytesIn(*piece);
  if (!total) return bytes <= carryLimit(ranks);
  return bytes <= *total && *total <= carryBytes();
}

}  // namespace

Carried::Carried(int ranks, size_t typical)
    : ranks_(ranks),
      memory_(padded(size_t(ranks) * sizeof(Slot), 64) + size_t(ranks) * padded(typical, 64)),
      used_(padded(size_t(ranks) * sizeof(Slot), 64)) {
  for (int r = 0; r < ranks; ++r) slots()[r] = Slot{nullptr, 0, kMissing};
}

std::span<const std::byte> Carried::piece(int rank) const {
  const Slot& slot = slots()[rank];
  return {slot.at != nullptr ? slot.at : memory_.data() + slot.offset, slot.length};
}

void Carried::reserve(size_t bytes) {
  if (used_ + bytes <= memory_.capacity()) return;
  // A rank whose HIER_CARRY_BYTES is larger than this one's, or an uneven all-to-all's larger piece.
  PieceMemory larger(std::max(2 * memory_.capacity(), used_ + bytes));
  std::memcpy(larger.data(), memory_.data(), used_);
  memory_ = std::move(larger);
}

void Carried::checkNew(int rank) const {
  if (rank < 0 || rank >= size() || has(rank)) {
    throw Error(ErrorKind::Internal, "agreement: rank " + std::to_string(rank) + "'s piece came twice");
  }
}

void Carried::add(int rank, PieceParts parts) {
  checkNew(rank);
  const size_t bytes = bytesIn(parts);
  reserve(padded(bytes, 64));
  slots()[rank] = Slot{nullptr, used_, bytes};
  for (const auto& part : parts) {
    if (!part.empty()) std::memcpy(memory_.data() + used_, part.data(), part.size());
    used_ += part.size();
  }
  used_ = slots()[rank].offset + padded(bytes, 64);
}

void Carried::refer(int rank, std::span<const std::byte> piece) {
  checkNew(rank);
  slots()[rank] = Slot{piece.data(), 0, piece.size()};
}

namespace {

// What every rank ends with, from the record they all combined to.
Agreement outcomeOf(const Record& record, std::optional<Carried>& carried) {
  Agreement outcome;
  if (record.refusingRank >= 0) {
    outcome.refusingRank = record.refusingRank;
    outcome.refusal.assign(record.refusal, strnlen(record.refusal, sizeof record.refusal));
  } else if (!(record.lowest == record.highest)) {
    outcome.first = Agreement::Party{record.lowestRank, record.lowest};
    outcome.second = Agreement::Party{record.highestRank, record.highest};
    if (outcome.second->rank < outcome.first->rank) std::swap(outcome.first, outcome.second);
  } else if (record.allCarried) {
    outcome.carried = std::move(carried);
  }
  return outcome;
}

// What a rank writes on its board in the arena: its own signature and what it says of itself, two cache
// lines that every other rank reads; the reason it refused the call, read only when it did; then its
// piece when it carries one.
struct BoardHead {
  CallSignature signature;
  int32_t refused;  // 1: this rank refused the call (the reason follows)
  int32_t carried;  // 1: this rank carries its piece
  uint64_t pieceBytes;
};
constexpr size_t kBoardRefusalAt = padded(sizeof(BoardHead), 64);
constexpr size_t kBoardPieceAt = kBoardRefusalAt + padded(sizeof(Record::refusal), 64);
static_assert(kBoardPieceAt + kMaxCarryBytes <= NodeArena::kBoardBytes, "a board must hold any piece");

// The record rank p's board holds: what p would have sent in a message of the first round.
Record recordOnBoard(const char* board, int p) {
  const auto* head = reinterpret_cast<const BoardHead*>(board);
  std::string refusal;
  if (head->refused) {
    const char* text = board + kBoardRefusalAt;
    refusal.assign(text, strnlen(text, sizeof(Record::refusal)));
  }
  Record record = recordOf(p, head->refused ? nullptr : &head->signature, refusal);
  record.allCarried = head->carried;
  return record;
}

// Equal signatures, most often byte for byte (each is zero-filled where its names end).
bool same(const CallSignature& a, const CallSignature& b) { return std::memcmp(&a, &b, sizeof a) == 0 || a == b; }

// The ranks of one host agree through their arena, in one step: each writes what it passes on its board
// and posts, then reads every other rank's board. A board is written again two agreements later, when
// every rank has read it: a rank posts agreement a + 1 only after reading every board of a, and the
// writer of a + 2 waited for all the posts of a + 1. So the pieces stay on the boards, where the others
// read them, until this rank's next agreement.
Agreement agreeOnBoards(NodeArena& arena, const Deadline& deadline, const CallSignature* mine,
                        const std::string& refusal, std::optional<PieceParts> piece, std::optional<size_t> total) {
  const int n = arena.size(), me = arena.rank();
  const uint64_t a = arena.takeAgreement();
  const uint32_t posted = uint32_t(a + 1);
  char* own = arena.board(me, a);
  BoardHead head{};
  head.refused = mine == nullptr;
  if (head.refused) {
    std::memset(own + kBoardRefusalAt, 0, sizeof(Record::refusal));
    std::memcpy(own + kBoardRefusalAt, refusal.data(), std::min(refusal.size(), sizeof(Record::refusal) - 1));
  } else {
    head.signature = *mine;
  }
  if (carries(n, mine, piece, total)) {
    head.carried = 1;
    for (const auto& part : *piece) {
      if (!part.empty()) std::memcpy(own + kBoardPieceAt + head.pieceBytes, part.data(), part.size());
      head.pieceBytes += part.size();
    }
  }
  std::memcpy(own, &head, sizeof head);
  arena.post(NodeArena::Agreed, posted);

  // Most calls: every rank passed what this one did.
  bool agreed = !head.refused;
  bool allCarried = head.carried;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    arena.waitOne(p, NodeArena::Agreed, posted, deadline);
    const auto* theirs = reinterpret_cast<const BoardHead*>(arena.board(p, a));
    agreed = agreed && !theirs->refused && same(theirs->signature, *mine);
    allCarried = allCarried && theirs->carried;
  }
  if (!agreed) {
    // Somebody refused or differs: every rank folds the same records, in any order, to the same outcome.
    Record record = recordOnBoard(own, me);
    for (int p = 0; p < n; ++p) {
      if (p != me) combine(record, recordOnBoard(arena.board(p, a), p));
    }
    std::optional<Carried> none;
    return outcomeOf(record, none);
  }
  Agreement outcome;
  if (!allCarried) return outcome;
  Carried& carried = outcome.carried.emplace(n, 0);
  for (int p = 0; p < n; ++p) {
    const char* board = arena.board(p, a);
    const uint64_t bytes = reinterpret_cast<const BoardHead*>(board)->pieceBytes;
    if (bytes > kMaxCarryBytes) {
      throw Error(ErrorKind::Internal, "agreement: rank " + std::to_string(p) + " wrote a piece of " +
                                           std::to_string(bytes) + " bytes on its board");
    }
    carried.refer(p, std::span<const std::byte>(reinterpret_cast<const std::byte*>(board + kBoardPieceAt), bytes));
  }
  return outcome;
}

}  // namespace

std::optional<Agreement> agreeInPlace(Group& group, const Deadline& deadline, const CallSignature* mine,
                                      const std::string& refusal, std::optional<PieceParts> piece,
                                      std::optional<size_t> total) {
  if (group.size() == 1) {
    Record record = recordOf(0, mine, refusal);
    std::optional<Carried> carried;
    if (carries(1, mine, piece, total)) {
      record.allCarried = 1;
      carried.emplace(1, bytesIn(*piece)).add(0, *piece);
    }
    return outcomeOf(record, carried);
  }
  if (NodeArena* arena = group.arenaIfReady()) return agreeOnBoards(*arena, deadline, mine, refusal, piece, total);
  return std::nullopt;
}

Agreement agree(Collective& c, const CallSignature* mine, const std::string& refusal, std::optional<PieceParts> piece,
                std::optional<size_t> total) {
  if (auto done = agreeInPlace(c.group(), c.deadline(), mine, refusal, piece, total)) return std::move(*done);
  const int n = c.size(), me = c.rank();
  Record record = recordOf(me, mine, refusal);
  std::optional<Carried> carried;
  std::vector<int> held;
  if (carries(n, mine, piece, total)) {
    record.allCarried = 1;
    // Room for n pieces the size of this rank's, as in a valid call; pieces of other sizes (an uneven
    // all-to-all's) grow it. Not n times the limit: a 16-byte allreduce would take 32 KB from the heap.
    carried.emplace(n, bytesIn(*piece));
    carried->add(me, *piece);
    held.push_back(me);
  }
  // In the collective's scratch memory, which outlives a request that a timeout left with UCX.
  const size_t capacity = messageCapacity(n);
  char* sent = c.scratch(2 * capacity);
  char* received = sent + capacity;
  for (int distance = 1; distance < n; distance *= 2) {
    const int to = (me + distance) % n, from = (me - distance + n) % n;
    // Of what this rank holds (ranks me, me-1, ..., me-distance+1), the receiver lacks the pieces of
    // the nearest `lacking`: all of them but in the last round of a size that is not a power of two.
    const size_t lacking = size_t(std::min(distance, n - distance));
    size_t count = record.allCarried ? std::min(held.size(), lacking) : 0;
    if (packedBytes(carried, held, count) > capacity) {
      // Only ranks that disagree get here (in a valid call the pieces come to at most kMaxCarryBytes):
      // no pieces then, and the call's outcome is their disagreement, whatever the record says of them.
      record.allCarried = 0;
      count = 0;
    }
    const size_t bytes = pack(sent, record, carried ? &*carried : nullptr, held, count);
    RequestPtr receive = c.receiveUpTo(from, received, capacity);
    std::vector<RequestPtr> requests{receive, c.send(to, sent, bytes)};
    c.wait(requests);
    const size_t got = receive->receivedBytes();
    if (got < sizeof(MessageHead)) {
      throw Error(
          ErrorKind::Mismatch,
          "agreement: rank " + std::to_string(from) + " sent " + std::to_string(got) + " bytes, less than a record",
          {from});
    }
    MessageHead head;
    std::memcpy(&head, received, sizeof head);
    combine(record, head.record);
    if (!record.allCarried) continue;
    // The sender carried its pieces too (else the record would say otherwise): ranks from, from-1, ...
    if (head.count != lacking) {
      throw Error(ErrorKind::Internal, "agreement: rank " + std::to_string(from) + " carried " +
                                           std::to_string(head.count) + " pieces in a round that needs " +
                                           std::to_string(lacking));
    }
    size_t at = sizeof(MessageHead);
    for (uint32_t i = 0; i < head.count; ++i) {
      if (at + sizeof(PieceHead) > got) {
        throw Error(ErrorKind::Internal, "agreement: rank " + std::to_string(from) + " sent a message cut short");
      }
      PieceHead p;
      std::memcpy(&p, received + at, sizeof p);
      at += sizeof p;
      if (p.rank != (from - int(i) + n) % n || at + p.bytes > got) {
        throw Error(ErrorKind::Internal, "agreement: rank " + std::to_string(from) + " sent a malformed piece");
      }
      const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(received + at), p.bytes);
      carried->add(p.rank, PieceParts(&bytes, 1));
      held.push_back(p.rank);
      at += padded(p.bytes, 8);
    }
  }
  // A group's first agreement goes in messages, which reach a rank however late its peers come, and
  // which a failure notice cuts short. Every rank has come now: the arena is set up (or found
  // impossible) for the agreements after this one, on every rank at the same point.
  c.group().arena(c.deadline());
  return outcomeOf(record, carried);
}

}  // namespace hier::transport
