// The reduction loops. This file is compiled once per instruction-set flavour (HIER_KERNEL_FLAVOUR names
// the namespace), and reduce.cpp picks the best flavour the CPU has at run time. The loops are written
// plainly so the compiler vectorises them; the data is almost always larger than the caches, so they are
// bound by memory bandwidth once vectorised.
#include <cstring>
#include <type_traits>

#include "transport/reduce/reduce_kernels.h"

namespace hier::transport::kernels::HIER_KERNEL_FLAVOUR {
namespace {

// How an element is stored and in which type it is computed.
template <typename T>
struct Plain {
  using Storage = T;
  using Compute = T;
  static Compute load(Storage s) { return s; }
  static Storage store(Compute c) { return c; }
};

// IEEE half precision through the compiler's _Float16 (GCC >= 12 and Clang on x86-64 and AArch64); with
// F16C the conversions vectorise.
#ifndef __FLT16_MANT_DIG__
#error "hier needs a compiler with _Float16 support (GCC 12 or newer)"
#endif
struct Half {
  using Storage = uint16_t;
  using Compute = float;
  static Compute load(Storage s) {
    _Float16 h;
    std::memcpy(&h, &s, sizeof h);
    return static_cast<float>(h);
  }
  static Storage store(Compute c) {
    _Float16 h = static_cast<_Float16>(c);
    Storage s;
    std::memcpy(&s, &h, sizeof s);
    return s;
  }
};

struct BHalf {
  using Storage = uint16_t;
  using Compute = float;
  static Compute load(Storage s) {
    uint32_t bits = uint32_t(s) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  static Storage store(Compute f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return Storage((bits >> 16) | 0x40);  // keep NaN quiet
    bits += 0x7fffu + ((bits >> 16) & 1);                                         // round to nearest even
    return Storage(bits >> 16);
  }
};

template <typename F>
struct ComplexOf {
  F re, im;
};

template <typename F>
struct Complex {
  using Storage = ComplexOf<F>;
  using Compute = ComplexOf<F>;
  static Compute load(Storage s) { return s; }
  static Storage store(Compute c) { return c; }
};

// Integer sums and products wrap around like torch's, computed unsigned to avoid undefined behaviour.
template <typename T>
T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return T(U(a) + U(b));
  } else {
    return a + b;
  }
}
template <typename T>
T wrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return T(U(a) * U(b));
  } else {
    return a * b;
  }
}

struct OpSum {
  template <typename T>
  static T apply(T a, T b) {
    return wrapAdd(a, b);
  }
  template <typename F>
  static ComplexOf<F> apply(ComplexOf<F> a, ComplexOf<F> b) {
    return {a.re + b.re, a.im + b.im};
  }
};
struct OpProduct {
  template <typename T>
  static T apply(T a, T b) {
    return wrapMul(a, b);
  }
  template <typename F>
  static ComplexOf<F> apply(ComplexOf<F> a, ComplexOf<F> b) {
    return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
  }
};
// MIN and MAX propagate NaN like torch.minimum / torch.maximum. a + b is NaN when either is.
struct OpMin {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a != a || b != b) ? a + b : (b < a ? b : a);
    } else {
      return b < a ? b : a;
    }
  }
};
struct OpMax {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a != a || b != b) ? a + b : (b > a ? b : a);
    } else {
      return b > a ? b : a;
    }
  }
};
struct OpAnd {
  template <typename T>
  static T apply(T a, T b) {
    return T(a & b);
  }
};
struct OpOr {
  template <typename T>
  static T apply(T a, T b) {
    return T(a | b);
  }
};
struct OpXor {
  template <typename T>
  static T apply(T a, T b) {
    return T(a ^ b);
  }
};

template <typename Traits, typename Op>
void combine(void* dst, const void* a, const void* b, size_t n) {
  using S = typename Traits::Storage;
  auto* d = static_cast<S*>(dst);
  auto* x = static_cast<const S*>(a);
  auto* y = static_cast<const S*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = Traits::store(Op::apply(Traits::load(x[i]), Traits::load(y[i])));
}

// Arithmetic (non-bitwise) ops for a type whose compute type is ordered.
template <typename Traits>
void arithmetic(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return combine<Traits, OpSum>(dst, a, b, n);
    case ReduceOp::Product: return combine<Traits, OpProduct>(dst, a, b, n);
    case ReduceOp::Min: return combine<Traits, OpMin>(dst, a, b, n);
    case ReduceOp::Max: return combine<Traits, OpMax>(dst, a, b, n);
    default: return;
  }
}

template <typename T>
void integer(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::BAnd: return combine<Plain<T>, OpAnd>(dst, a, b, n);
    case ReduceOp::BOr: return combine<Plain<T>, OpOr>(dst, a, b, n);
    case ReduceOp::BXor: return combine<Plain<T>, OpXor>(dst, a, b, n);
    default: return arithmetic<Plain<T>>(dst, a, b, n, op);
  }
}

// bool is one byte holding 0 or 1: SUM and MAX are OR, PRODUCT and MIN are AND.
void boolean(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Max:
    case ReduceOp::BOr: return combine<Plain<uint8_t>, OpOr>(dst, a, b, n);
    case ReduceOp::Product:
    case ReduceOp::Min:
    case ReduceOp::BAnd: return combine<Plain<uint8_t>, OpAnd>(dst, a, b, n);
    case ReduceOp::BXor: return combine<Plain<uint8_t>, OpXor>(dst, a, b, n);
    default: return;
  }
}

template <typename F>
void complex(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  if (op == ReduceOp::Product) return combine<Complex<F>, OpProduct>(dst, a, b, n);
  return combine<Complex<F>, OpSum>(dst, a, b, n);
}

template <typename Traits, typename D>
void divide(void* data, size_t n, D divisor) {
  using S = typename Traits::Storage;
  auto* p = static_cast<S*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = Traits::store(Traits::load(p[i]) / divisor);
}

template <typename F>
void divideComplex(void* data, size_t n, F divisor) {
  auto* p = static_cast<F*>(data);
  for (size_t i = 0; i < 2 * n; ++i) p[i] /= divisor;
}

template <typename Traits, typename F>
void multiply(void* dst, const void* src, size_t n, F factor) {
  using S = typename Traits::Storage;
  auto* d = static_cast<S*>(dst);
  auto* s = static_cast<const S*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = Traits::store(Traits::load(s[i]) * factor);
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t n, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::Float32: return arithmetic<Plain<float>>(dst, a, b, n, op);
    case DataType::Float64: return arithmetic<Plain<double>>(dst, a, b, n, op);
    case DataType::Float16: return arithmetic<Half>(dst, a, b, n, op);
    case DataType::BFloat16: return arithmetic<BHalf>(dst, a, b, n, op);
    case DataType::Int8: return integer<int8_t>(dst, a, b, n, op);
    case DataType::Int16: return integer<int16_t>(dst, a, b, n, op);
    case DataType::Int32: return integer<int32_t>(dst, a, b, n, op);
    case DataType::Int64: return integer<int64_t>(dst, a, b, n, op);
    case DataType::UInt8: return integer<uint8_t>(dst, a, b, n, op);
    case DataType::Bool: return boolean(dst, a, b, n, op);
    case DataType::Complex64: return complex<float>(dst, a, b, n, op);
    case DataType::Complex128: return complex<double>(dst, a, b, n, op);
  }
}

void finishAverage(void* data, size_t n, DataType dtype, int64_t divisor) {
  switch (dtype) {
    case DataType::Float32: return divide<Plain<float>>(data, n, float(divisor));
    case DataType::Float64: return divide<Plain<double>>(data, n, double(divisor));
    case DataType::Float16: return divide<Half>(data, n, float(divisor));
    case DataType::BFloat16: return divide<BHalf>(data, n, float(divisor));
    case DataType::Int8: return divide<Plain<int8_t>>(data, n, int32_t(divisor));
    case DataType::Int16: return divide<Plain<int16_t>>(data, n, int32_t(divisor));
    case DataType::Int32: return divide<Plain<int32_t>>(data, n, int64_t(divisor));
    case DataType::Int64: return divide<Plain<int64_t>>(data, n, int64_t(divisor));
    case DataType::UInt8: return divide<Plain<uint8_t>>(data, n, int32_t(divisor));
    case DataType::Complex64: return divideComplex<float>(data, n, float(divisor));
    case DataType::Complex128: return divideComplex<double>(data, n, double(divisor));
    case DataType::Bool: return;
  }
}

void scale(void* dst, const void* src, size_t n, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::Float32: return multiply<Plain<float>>(dst, src, n, float(factor));
    case DataType::Float64: return multiply<Plain<double>>(dst, src, n, factor);
    case DataType::Float16: return multiply<Half>(dst, src, n, float(factor));
    case DataType::BFloat16: return multiply<BHalf>(dst, src, n, float(factor));
    case DataType::Complex64: return multiply<Plain<float>>(dst, src, 2 * n, float(factor));
    case DataType::Complex128: return multiply<Plain<double>>(dst, src, 2 * n, factor);
    default: return;
  }
}

}  // namespace hier::transport::kernels::HIER_KERNEL_FLAVOUR
