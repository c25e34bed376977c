// One set of reduction loops per instruction-set flavour; see reduce_kernels.cpp and reduce.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/base/types.h"

#define HIER_DECLARE_KERNELS(flavour)                                                              \
  namespace hier::transport::kernels::flavour {                                                    \
  void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op); \
  void finishAverage(void* data, size_t count, DataType dtype, int64_t divisor);                   \
  void scale(void* dst, const void* src, size_t count, DataType dtype, double factor);             \
  }

HIER_DECLARE_KERNELS(generic)
#if defined(__x86_64__)
HIER_DECLARE_KERNELS(x86_64_v3)
#endif
