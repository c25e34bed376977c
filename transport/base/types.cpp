#include "transport/base/types.h"

namespace hier::transport {

size_t elementSize(DataType dtype) {
  switch (dtype) {
    case DataType::Float64:
    case DataType::Int64:
    case DataType::Complex64: return 8;
    case DataType::Float32:
    case DataType::Int32: return 4;
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Int16: return 2;
    case DataType::Int8:
    case DataType::UInt8:
    case DataType::Bool: return 1;
    case DataType::Complex128: return 16;
  }
  return 1;
}

const char* toString(DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::Float16: return "float16";
    case DataType::BFloat16: return "bfloat16";
    case DataType::Int8: return "int8";
    case DataType::Int16: return "int16";
    case DataType::Int32: return "int32";
    case DataType::Int64: return "int64";
    case DataType::UInt8: return "uint8";
    case DataType::Bool: return "bool";
    case DataType::Complex64: return "complex64";
    case DataType::Complex128: return "complex128";
  }
  return "unknown";
}

const char* toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "SUM";
    case ReduceOp::Avg: return "AVG";
    case ReduceOp::Product: return "PRODUCT";
    case ReduceOp::Min: return "MIN";
    case ReduceOp::Max: return "MAX";
    case ReduceOp::BAnd: return "BAND";
    case ReduceOp::BOr: return "BOR";
    case ReduceOp::BXor: return "BXOR";
  }
  return "unknown";
}

std::optional<std::string> unsupportedReason(ReduceOp op, DataType dtype) {
  const bool floating = dtype == DataType::Float32 || dtype == DataType::Float64 || dtype == DataType::Float16 ||
                        dtype == DataType::BFloat16;
  const bool complex = dtype == DataType::Complex64 || dtype == DataType::Complex128;
  const bool bitwise = op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
  if (bitwise && (floating || complex)) {
    return std::string(toString(op)) + " is a bitwise operation and needs an integer or bool tensor, not " +
           toString(dtype);
  }
  if (complex && (op == ReduceOp::Min || op == ReduceOp::Max)) {
    return std::string(toString(op)) + " has no order on complex numbers (" + toString(dtype) + ")";
  }
  if (dtype == DataType::Bool && op == ReduceOp::Avg) {
    return std::string("AVG of bool values is not a bool; reduce a float or integer tensor instead");
  }
  return std::nullopt;
}

bool averagesByPremultiplying(DataType dtype) { return dtype == DataType::Float16 || dtype == DataType::BFloat16; }

size_t totalBytes(const std::vector<Buffer>& parts) {
  size_t total = 0;
  for (const auto& part : parts) total += part.bytes();
  return total;
}

size_t totalCount(const std::vector<Buffer>& parts) {
  size_t total = 0;
  for (const auto& part : parts) total += part.count;
  return total;
}

}  // namespace hier::transport
