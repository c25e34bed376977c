#include "transport/reduce/reduce.h"

#include "transport/reduce/reduce_kernels.h"

namespace hier::transport {
namespace {

struct Kernels {
  decltype(&kernels::generic::reduce) reduce;
  decltype(&kernels::generic::finishAverage) finishAverage;
  decltype(&kernels::generic::scale) scale;
  const char* flavour;
};

// AVX2 + FMA + F16C, the x86-64-v3 level, when the CPU has it; the baseline build otherwise.
Kernels select() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return {kernels::x86_64_v3::reduce, kernels::x86_64_v3::finishAverage, kernels::x86_64_v3::scale, "x86-64-v3"};
  }
#endif
  return {kernels::generic::reduce, kernels::generic::finishAverage, kernels::generic::scale, "generic"};
}

const Kernels& kernelsForThisCpu() {
  static const Kernels chosen = select();
  return chosen;
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  if (count != 0) kernelsForThisCpu().reduce(dst, a, b, count, dtype, op);
}

void finishAverage(void* data, size_t count, DataType dtype, int64_t divisor) {
  if (count != 0 && divisor != 1) kernelsForThisCpu().finishAverage(data, count, dtype, divisor);
}

void scale(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  if (count != 0) kernelsForThisCpu().scale(dst, src, count, dtype, factor);
}

const char* reduceKernelFlavour() { return kernelsForThisCpu().flavour; }

}  // namespace hier::transport
