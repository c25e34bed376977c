// Plain descriptions of memory and arithmetic that the transport moves and reduces.
// Nothing here knows about torch: the plugin translates tensors into these views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hier::transport {

// Element types the CPU reduction kernels understand. Collectives that only move bytes (allgather,
// broadcast, all-to-all, ...) describe their buffers as UInt8, so every torch dtype can travel.
enum class DataType : uint8_t {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  Bool,
  Complex64,
  Complex128,
};

enum class ReduceOp : uint8_t { Sum, Avg, Product, Min, Max, BAnd, BOr, BXor };

// Where a buffer lives. UCX is always told this explicitly, never left to guess from the pointer.
enum class MemoryType : uint8_t { Host, Cuda };

size_t elementSize(DataType dtype);
const char* toString(DataType dtype);
const char* toString(ReduceOp op);

// Why `op` cannot reduce `dtype` (for example BAND on float32), or nothing when it can.
std::optional<std::string> unsupportedReason(ReduceOp op, DataType dtype);

// Whether AVG of `dtype` runs as a sum of terms each scaled by 1/n first (NCCL's AVG of floating types)
// rather than a sum divided at the end: the 16-bit floats, whose sum of n terms overflows where their mean
// does not (n ranks of 60000 in float16). Wider floats keep the sum then the division, which rounds as a
// local mean does.
bool averagesByPremultiplying(DataType dtype);

// How a collective reduces: `op`, or with `scale`, the sum of every contribution multiplied by it
// (PREMUL_SUM's way, applied inside the reduction where the reducer can).
struct Reduction {
  ReduceOp op = ReduceOp::Sum;
  std::optional<double> scale;
  // Device buffers only: the scale as one element of the data's type in device memory, read when the
  // device reduces (NCCL's device scalar), so that no host waits for it; `scale` is then unset.
  const void* deviceScale = nullptr;
};

// A typed view of memory the caller owns. `count` is in elements of `dtype`.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::UInt8;
  MemoryType memory = MemoryType::Host;

  size_t bytes() const { return count * elementSize(dtype); }
  char* bytePtr() const { return static_cast<char*>(data); }
  // Address of element `offset`.
  void* at(size_t offset) const { return bytePtr() + offset * elementSize(dtype); }
  // Elements [offset, offset + n) of this view.
  Buffer slice(size_t offset, size_t n) const {
    return Buffer{bytePtr() + offset * elementSize(dtype), n, dtype, memory};
  }
};

// What a list of per-rank parts comes to, in bytes and in elements.
size_t totalBytes(const std::vector<Buffer>& parts);
size_t totalCount(const std::vector<Buffer>& parts);

}  // namespace hier::transport
