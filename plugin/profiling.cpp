#include "plugin/profiling.hpp"

namespace hier {

int64_t elementsOf(c10::ArrayRef<at::Tensor> tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.defined() ? t.numel() : 0;
  return n;
}

at::ScalarType dtypeOf(c10::ArrayRef<at::Tensor> inputs, c10::ArrayRef<at::Tensor> outputs) {
  for (const auto list : {inputs, outputs}) {
    for (const auto& t : list) {
      if (t.defined()) return t.scalar_type();
    }
  }
  return at::kByte;
}

}  // namespace hier
