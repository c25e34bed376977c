// Test data every rank can rebuild for every other rank, and what the reductions of it must give.
#pragma once

#include <cstddef>
#include <vector>

#include "transport/base/types.h"

namespace hier::testing {

// What rank r contributes at index i: small integers, exact in float32 sums.
inline float value(int rank, size_t i) { return float((rank + 1) * 3) + float(i % 17) - 8.0f; }

// The reduction of value(r, i) over ranks 0..size-1, for Sum, Avg, Min and Max (value grows with the rank).
inline float expectedReduction(transport::ReduceOp op, int size, size_t i) {
  if (op == transport::ReduceOp::Min) return value(0, i);
  if (op == transport::ReduceOp::Max) return value(size - 1, i);
  float sum = 0.0f;
  for (int r = 0; r < size; ++r) sum += value(r, i);
  return op == transport::ReduceOp::Avg ? sum / float(size) : sum;
}

inline transport::Buffer view(std::vector<float>& v) {
  return transport::Buffer{v.data(), v.size(), transport::DataType::Float32, transport::MemoryType::Host};
}

// One part per rank, of unequal sizes (count + r elements for rank r), and their views: for allgather
// and reduce-scatter with uneven parts.
struct UnevenParts {
  std::vector<std::vector<float>> parts;
  std::vector<transport::Buffer> views;
};
// Every part filled with `fill` (outputs).
inline UnevenParts unevenParts(int ranks, size_t count, float fill) {
  UnevenParts u{std::vector<std::vector<float>>(static_cast<size_t>(ranks)), {}};
  for (int r = 0; r < ranks; ++r) {
    u.parts[size_t(r)].assign(count + size_t(r), fill);
    u.views.push_back(view(u.parts[size_t(r)]));
  }
  return u;
}
// What rank `rank` contributes to each rank b's reduction: value(rank, j + 10 b) at j (inputs).
inline UnevenParts unevenContributions(int rank, int ranks, size_t count) {
  UnevenParts u = unevenParts(ranks, count, 0.0f);
  for (int b = 0; b < ranks; ++b) {
    for (size_t j = 0; j < count + size_t(b); ++j) u.parts[size_t(b)][j] = value(rank, j + 10 * size_t(b));
  }
  return u;
}

}  // namespace hier::testing
