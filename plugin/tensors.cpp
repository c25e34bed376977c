#include "plugin/tensors.hpp"

#include <ATen/ops/empty_like.h>

#include <array>

#include "registry/torch_version.hpp"

namespace hier {

using transport::DataType;

const char* pythonDtypeName(at::ScalarType dtype) {
  static const auto names = [] {
    std::array<std::string, size_t(at::ScalarType::NumOptions)> all;
    for (size_t i = 0; i < all.size(); ++i) {
      try {
        all[i] = c10::getDtypeNames(at::ScalarType(i)).first;
      } catch (const c10::Error&) {
        all[i] = c10::toString(at::ScalarType(i));  // a type without a Python name
      }
    }
    return all;
  }();
  const auto index = size_t(dtype);
  return index < names.size() ? names[index].c_str() : c10::toString(dtype);
}

std::optional<DataType> reductionType(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return DataType::Float32;
    case at::kDouble: return DataType::Float64;
    case at::kHalf: return DataType::Float16;
    case at::kBFloat16: return DataType::BFloat16;
    case at::kChar: return DataType::Int8;
    case at::kShort: return DataType::Int16;
    case at::kInt: return DataType::Int32;
    case at::kLong: return DataType::Int64;
    case at::kByte: return DataType::UInt8;
    case at::kBool: return DataType::Bool;
    case at::kComplexFloat: return DataType::Complex64;
    case at::kComplexDouble: return DataType::Complex128;
    default: return std::nullopt;
  }
}

TransportReduceOp transportReduceOp(const c10d::ReduceOp& reduceOp,
                                    const std::function<void(const std::string&)>& reject) {
  switch (reduceOp.op_) {
    case c10d::ReduceOp::SUM: return {transport::ReduceOp::Sum, std::nullopt, {}};
    case c10d::ReduceOp::AVG: return {transport::ReduceOp::Avg, std::nullopt, {}};
    case c10d::ReduceOp::PRODUCT: return {transport::ReduceOp::Product, std::nullopt, {}};
    case c10d::ReduceOp::MIN: return {transport::ReduceOp::Min, std::nullopt, {}};
    case c10d::ReduceOp::MAX: return {transport::ReduceOp::Max, std::nullopt, {}};
    case c10d::ReduceOp::BAND: return {transport::ReduceOp::BAnd, std::nullopt, {}};
    case c10d::ReduceOp::BOR: return {transport::ReduceOp::BOr, std::nullopt, {}};
    case c10d::ReduceOp::BXOR: return {transport::ReduceOp::BXor, std::nullopt, {}};
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* supplement = dynamic_cast<torch_compat::PreMulSumSupplement*>(reduceOp.supplement_.get());
      if (supplement == nullptr)
        reject("PREMUL_SUM needs its factor; make the op with dist._make_nccl_premul_sum(factor)");
      const at::Tensor& factor = supplement->tensor_factor;
      if (factor.defined() && factor.is_cuda()) return {transport::ReduceOp::Sum, std::nullopt, factor};
      return {transport::ReduceOp::Sum, factor.defined() ? factor.item<double>() : supplement->double_factor, {}};
    }
    default: reject("unknown reduce op " + std::to_string(int(reduceOp.op_)));
  }
  return {transport::ReduceOp::Sum, std::nullopt, {}};  // not reached: reject throws
}

transport::Buffer typedView(const at::Tensor& tensor, DataType dtype) {
  return transport::Buffer{tensor.data_ptr(), size_t(tensor.numel()), dtype, transport::MemoryType::Host};
}

transport::Buffer byteView(const at::Tensor& tensor) {
  return transport::Buffer{tensor.data_ptr(), size_t(tensor.numel()) * tensor.element_size(), DataType::UInt8,
                           transport::MemoryType::Host};
}

transport::Buffer byteView(const at::Tensor& tensor, size_t offset, size_t length) {
  return transport::Buffer{static_cast<char*>(tensor.data_ptr()) + offset, length, DataType::UInt8,
                           transport::MemoryType::Host};
}

Staged::Staged(const at::Tensor& tensor, bool copyIn) : original_(tensor) {
  if (tensor.is_contiguous()) {
    work_ = tensor;
  } else {
    work_ = copyIn ? tensor.contiguous() : at::empty_like(tensor, at::MemoryFormat::Contiguous);
  }
}

void Staged::finish() const {
  if (!work_.is_same(original_)) original_.copy_(work_);
}

}  // namespace hier
