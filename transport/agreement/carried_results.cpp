#include "transport/agreement/carried_results.h"

#include <cstring>
#include <string>

#include "transport/base/error.h"
#include "transport/reduce/reduce.h"

namespace hier::transport::carried {

Bytes bytesOf(const std::vector<uint64_t>& values) { return std::as_bytes(std::span(values)); }

void misfit(const char* what, size_t got, size_t want) {
  throw Error(ErrorKind::Mismatch, std::string(what) + ": a rank's part is " + std::to_string(got) +
                                       " bytes where this rank expects " + std::to_string(want));
}

void copyInto(Bytes from, const Buffer& to) {
  if (from.size() != to.bytes()) misfit("carried data", from.size(), to.bytes());
  if (!from.empty() && from.data() != to.data) std::memcpy(to.data, from.data(), from.size());
}

void copyEach(const Carried& all, const std::vector<Buffer>& outs) {
  for (size_t r = 0; r < outs.size(); ++r) copyInto(all.piece(int(r)), outs[r]);
}

Pieces withPartTable(const Pieces& parts, std::vector<uint64_t>& table) {
  table.assign(1, 0);
  for (const auto& part : parts) table.push_back(table.back() + part.size());
  Pieces piece{bytesOf(table)};
  piece.insert(piece.end(), parts.begin(), parts.end());
  return piece;
}

size_t partTableBytes(size_t parts) { return (parts + 1) * sizeof(uint64_t); }

Bytes partOf(Bytes piece, size_t index, size_t parts) {
  const size_t header = partTableBytes(parts);
  if (piece.size() < header) misfit("carried parts", piece.size(), header);
  uint64_t begin, end;
  std::memcpy(&begin, piece.data() + index * sizeof(uint64_t), sizeof begin);
  std::memcpy(&end, piece.data() + (index + 1) * sizeof(uint64_t), sizeof end);
  if (begin > end || header + end > piece.size()) misfit("carried parts", piece.size(), header + end);
  return piece.subspan(header + begin, end - begin);
}

void reduceCarried(const Carried& all, size_t first, const Buffer& out, ReduceOp op) {
  const size_t at = first * elementSize(out.dtype), bytes = out.bytes();
  auto from = [&](int rank) {
    Bytes piece = all.piece(rank);
    if (piece.size() < at + bytes) misfit("carried reduction input", piece.size(), at + bytes);
    return piece.data() + at;
  };
  if (bytes == 0) return;
  if (all.size() == 1) {
    std::memcpy(out.data, from(0), bytes);
  } else {
    reduce(out.data, from(0), from(1), out.count, out.dtype, op);
    for (int r = 2; r < all.size(); ++r) reduce(out.data, out.data, from(r), out.count, out.dtype, op);
  }
  if (op == ReduceOp::Avg) finishAverage(out.data, out.count, out.dtype, all.size());
}

void reduceCarriedAtRoot(const Carried& all, int root, const Buffer& own, const Buffer& out, ReduceOp op) {
  const int n = all.size();
  const void* sofar = own.data;
  for (int j = 1; j < n; ++j) {
    Bytes piece = all.piece((root + j) % n);
    if (piece.size() != out.bytes()) misfit("carried reduction input", piece.size(), out.bytes());
    if (out.count != 0) reduce(out.data, sofar, piece.data(), out.count, out.dtype, op);
    sofar = out.data;
  }
  if (sofar != out.data && out.bytes() != 0) std::memcpy(out.data, sofar, out.bytes());
  if (op == ReduceOp::Avg) finishAverage(out.data, out.count, out.dtype, n);
}

}  // namespace hier::transport::carried
