// CPU reduction kernels for every dtype and reduce op the collectives accept.
//
// All ops here are commutative and evaluated element by element, so `a op b` and `b op a` give the same
// bits: that is what lets every rank of an allreduce end with identical results whatever order the
// algorithm combined the contributions in. float16 and bfloat16 are widened to float for each step and
// rounded back (round to nearest even), like NCCL does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/base/types.h"

namespace hier::transport {

// dst[i] = a[i] op b[i]. `dst` may alias `a` or `b`. AVG combines like SUM; finishAverage divides.
// Call unsupportedReason() first: an unsupported (op, dtype) pair is a programming error here.
void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

// data[i] /= divisor, the last step of AVG. Integers divide truncating toward zero (as NCCL does).
void finishAverage(void* data, size_t count, DataType dtype, int64_t divisor);

// dst[i] = src[i] * factor, PREMUL_SUM's pre-multiplication. Floating-point and complex dtypes only.
void scale(void* dst, const void* src, size_t count, DataType dtype, double factor);

// Which kernel build runs on this CPU ("x86-64-v3" or "generic"); reported by diagnostics.
const char* reduceKernelFlavour();

}  // namespace hier::transport
