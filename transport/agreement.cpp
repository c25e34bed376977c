#include "transport/agreement.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <tuple>


namespace hier::transport {
namespace {

// What travels: plain bytes, the same layout on every rank (one build of the library per job).
struct Record {
  CallSignature lowest;
  CallSignature highest;
  int32_t lowestRank;   // -1: no signature seen yet (only refusals)
  int32_t highestRank;
  int32_t refusingRank;  // -1: nobody refused
  char refusal[404];
};

Record recordOf(int rank, const CallSignature* mine, const std::string& refusal) {
  Record r{};
  r.lowestRank = r.highestRank = r.refusingRank = -1;
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
void setText(char (&field)[N], const std::string& value) {
  std::memset(field, 0, N);
  std::memcpy(field, value.data(), std::min(value.size(), N - 1));
}

auto key(const CallSignature& s) {
  return std::make_tuple(text(s.op), text(s.dtype), text(s.reduceOp), s.root, s.parts, s.elements, s.layout);
}

}  // namespace

CallSignature::CallSignature(const std::string& op_, const std::string& dtype_, uint64_t elements_, uint32_t parts_)
    : parts(parts_), elements(elements_) {
  setText(op, op_);
  setText(dtype, dtype_);
}

void CallSignature::setReduceOp(const std::string& name) { setText(reduceOp, name); }

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

Agreement agree(Collective& c, const CallSignature* mine, const std::string& refusal) {
  const int n = c.size(), me = c.rank();
  Record record = recordOf(me, mine, refusal);
  if (n > 1) {
    // In the collective's scratch memory, which outlives a request that a timeout left with UCX.
    auto* sent = reinterpret_cast<Record*>(c.scratch(2 * sizeof(Record)));
    Record* received = sent + 1;
    for (int distance = 1; distance < n; distance *= 2) {
      *sent = record;
      std::vector<RequestPtr> requests;
      requests.push_back(c.receive((me - distance + n) % n, received, sizeof(Record)));
      requests.push_back(c.send((me + distance) % n, sent, sizeof(Record)));
      c.wait(requests);
      combine(record, *received);
    }
  }
  Agreement outcome;
  if (record.refusingRank >= 0) {
    outcome.refusingRank = record.refusingRank;
    outcome.refusal.assign(record.refusal, strnlen(record.refusal, sizeof record.refusal));
  } else if (!(record.lowest == record.highest)) {
    outcome.first = Agreement::Party{record.lowestRank, record.lowest};
    outcome.second = Agreement::Party{record.highestRank, record.highest};
    if (outcome.second->rank < outcome.first->rank) std::swap(outcome.first, outcome.second);
  }
  return outcome;
}

}  // namespace hier::transport
