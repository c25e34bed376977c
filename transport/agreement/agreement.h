// Before a collective moves any data, its ranks agree on it: that they all make the same call (the
// same operation, element type, sizes, reduction and root), and that none of them refused it (bad
// arguments that only that rank can see, such as a root's wrong scatter list). Either failure is then
// known to every rank before anything was sent, so each raises the same error at once and the group
// stays usable; without it, a disagreement hangs until the deadline or, worse, returns a wrong result.
//
// One small record per rank, combined in ceil(log2 n) rounds of a dissemination exchange (round k:
// send to rank + 2^k, receive from rank - 2^k), on the tags of a collective of its own. What is
// combined is idempotent (the lowest and the highest signature with a rank holding each, the lowest
// refusing rank), so every rank ends with the same outcome. Where all the ranks are on one host and
// share an arena (transport/arena), they skip the messages: each writes its record on its board there
// and reads everyone else's, one step in place of the rounds. (The group's first agreement goes in
// messages, and sets the arena up once every rank has come.)
//
// Where there is nothing to exchange messages for (one rank), or the ranks share an arena, the
// agreement needs no collective of its own: agreeInPlace() takes it then, and the pieces on the boards
// are read where they are, not copied out.
//
// A small collective's data rides in the same messages. Each rank passes its piece (everything it
// contributes); round k carries, besides the record, the pieces the sender holds that the receiver
// lacks (Bruck's allgather), so after the last round every rank holds every piece, and computes its
// results from them: the collective then costs the agreement's rounds and nothing more. A rank carries
// its piece only when it is at most carryLimit(size) bytes, and the pieces count only when every rank
// carried one (part of the record), so all ranks take the same road. Where the caller knows what all the
// pieces come to together in a valid call (a broadcast's: the root's data, the others carry nothing),
// it passes that total, and the pieces ride when the total is within HIER_CARRY_BYTES, each piece
// however large its share: a rooted collective then rides in the agreement up to the same bytes
// moved as a symmetric one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transport/group/collective.h"

namespace hier::transport {

// What a rank passes to one collective, as far as every rank must pass the same.
// Names are the caller's words (its op and dtype names), compared as text.
struct CallSignature {
  char op[32] = {};        // the collective's name
  char dtype[16] = {};     // the element type's name; empty where there is none (barrier)
  char reduceOp[16] = {};  // empty where the call reduces nothing
  int32_t root = -1;       // -1 where there is none
  uint32_t parts = 0;      // tensors in the call (a list form's length)
  uint64_t elements = 0;   // the elements all ranks must agree on
  uint64_t layout = 0;     // a digest of the parts' sizes where they must match part by part (0: none)

  CallSignature() = default;
  CallSignature(std::string_view op, std::string_view dtype, uint64_t elements, uint32_t parts = 1);
  void setReduceOp(std::string_view name);
  // "allreduce(Float, 100000 elements, SUM)"
  std::string describe() const;
  bool operator==(const CallSignature& other) const;
  bool operator<(const CallSignature& other) const;
};

// Mixes `value` into a layout digest (FNV-1a over its bytes).
uint64_t digest(uint64_t seed, uint64_t value);
inline constexpr uint64_t kDigestSeed = 14695981039346656037ull;

// The most a rank's piece may be for a group of `ranks`, where the pieces' total is not known: HIER_CARRY_BYTES
// shared among them. Whatever the setting, the pieces of one agreement together are at most kMaxCarryBytes
// in a valid call (a message that would be larger, from ranks that disagree, carries no pieces).
inline constexpr size_t kMaxCarryBytes = 64 * 1024;
size_t carryLimit(int ranks);

// Cache-line aligned memory for carried pieces. The largest block (up to 128 KiB) a thread let go of is
// kept for its next agreement: a small collective then takes nothing from the heap, where a request of a
// KiB or more also has glibc consolidate its fast bins first (a tenth of a microsecond, every call).
class PieceMemory {
 public:
  explicit PieceMemory(size_t bytes);
  PieceMemory(PieceMemory&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}
  PieceMemory& operator=(PieceMemory&& other) noexcept;
  ~PieceMemory() { release(); }
  std::byte* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  void release() noexcept;
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
};

// A rank's piece: its parts, one after another.
using PieceParts = std::span<const std::span<const std::byte>>;

// Every rank's piece, each 64-byte aligned (the reduction kernels read them as typed arrays): copied in
// (add), or left where it is (refer).
class Carried {
 public:
  // Room for `ranks` pieces of up to `typical` bytes each; it grows for larger ones.
  Carried(int ranks, size_t typical);
  int size() const { return ranks_; }
  // Valid until the next add().
  std::span<const std::byte> piece(int rank) const;
  // Appends rank `rank`'s piece, made of `parts` one after another.
  void add(int rank, PieceParts parts);
  // Rank `rank`'s piece stays at `piece` (64-byte aligned), which must outlive this object's use.
  void refer(int rank, std::span<const std::byte> piece);
  bool has(int rank) const { return slots()[rank].length != kMissing; }

 private:
  static constexpr size_t kMissing = ~size_t(0);
  // Where a piece is: at `at` (left in place), or at `offset` in memory_.
  struct Slot {
    const std::byte* at;
    size_t offset;
    size_t length;
  };
  Slot* slots() const { return reinterpret_cast<Slot*>(memory_.data()); }
  // Makes room for `bytes` more in memory_, which may move (slots and pieces with it).
  void reserve(size_t bytes);
  // Throws unless `rank` is a rank of the group whose piece is not here yet.
  void checkNew(int rank) const;

  int ranks_;
  PieceMemory memory_;  // the slots, then the pieces copied in
  size_t used_;
};

struct Agreement {
  // The lowest rank that refused the call, and why; -1 when none did.
  int refusingRank = -1;
  std::string refusal;
  // Two ranks whose signatures differ, and what each passed; set only when no rank refused.
  struct Party {
    int rank;
    CallSignature signature;
  };
  std::optional<Party> first, second;

  // Every rank's piece: set when the ranks agreed and every one of them carried a piece.
  std::optional<Carried> carried;

  bool agreed() const { return refusingRank < 0 && !first; }
  // What went wrong, for the error every rank raises: names the ranks and what each passed or why it
  // refused. Empty when the ranks agreed.
  std::string describe() const;
};

// Runs the agreement on `c` (a collective of its own: its tags carry nothing else). This rank passes
// `mine`, or refuses the call for `refusal` when `mine` is null, and carries `piece` (its parts one
// after another) when there is one within the limit: carryLimit() for each piece, or, where the caller
// passes `total` (what every rank's pieces come to together in a valid call), HIER_CARRY_BYTES for that
// total. Throws Error as any collective does when a peer does not take part within the deadline.
Agreement agree(Collective& c, const CallSignature* mine, const std::string& refusal = {},
                std::optional<PieceParts> piece = std::nullopt, std::optional<size_t> total = std::nullopt);

// The same without a collective, where none is needed: `group` has one rank, or an arena ready for
// agreements (all of its ranks are on this host, and its first agreement is over). Returns nothing
// otherwise; then the caller runs agree() on a collective of its own. The pieces it carried are left
// in place: valid while the caller's own piece lives and until this rank's next agreement on `group`.
std::optional<Agreement> agreeInPlace(Group& group, const Deadline& deadline, const CallSignature* mine,
                                      const std::string& refusal = {}, std::optional<PieceParts> piece = std::nullopt,
                                      std::optional<size_t> total = std::nullopt);

}  // namespace hier::transport
