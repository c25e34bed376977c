// The reduction kernels against references computed independently in double or in wide integers.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "transport/reduce/reduce.h"

namespace hier::transport {
namespace {

constexpr size_t kCount = 1003;  // not a multiple of any vector width

// IEEE half decoded by formula, independent of the compiler's _Float16.
double halfToDouble(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(mantissa, -24);
  else if (exponent == 31)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

double bf16ToDouble(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

double applyReal(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return a + b;
    case ReduceOp::Product: return a * b;
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
    default: ADD_FAILURE() << "not an arithmetic op"; return 0;
  }
}

const ReduceOp kArithmetic[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max};
const ReduceOp kAll[] = {ReduceOp::Sum, ReduceOp::Avg,  ReduceOp::Product, ReduceOp::Min,
                         ReduceOp::Max, ReduceOp::BAnd, ReduceOp::BOr,     ReduceOp::BXor};

template <typename T>
void checkFloating(DataType dtype, double relativeTolerance) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 4.0);
  std::vector<T> a(kCount), b(kCount), out(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    a[i] = T(normal(rng));
    b[i] = T(normal(rng));
  }
  for (ReduceOp op : kArithmetic) {
    reduce(out.data(), a.data(), b.data(), kCount, dtype, op);
    for (size_t i = 0; i < kCount; ++i) {
      double expected = applyReal(op, double(a[i]), double(b[i]));
      ASSERT_NEAR(double(out[i]), expected, relativeTolerance * (std::abs(expected) + 1e-30))
          << toString(dtype) << " " << toString(op) << " at " << i;
    }
  }
}

TEST(Reduce, Float32AndFloat64MatchDouble) {
  checkFloating<float>(DataType::Float32, 1e-7);
  checkFloating<double>(DataType::Float64, 0);
}

// float16 and bfloat16 from random finite bit patterns, reduced in float and rounded once.
void checkHalfType(DataType dtype, double (*decode)(uint16_t), uint16_t exponentMask, double epsilon) {
  std::mt19937 rng(11);
  std::vector<uint16_t> a(kCount), b(kCount), out(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    do {
      a[i] = uint16_t(rng());
    } while ((a[i] & exponentMask) == exponentMask);
    do {
      b[i] = uint16_t(rng());
    } while ((b[i] & exponentMask) == exponentMask);
  }
  for (ReduceOp op : kArithmetic) {
    reduce(out.data(), a.data(), b.data(), kCount, dtype, op);
    for (size_t i = 0; i < kCount; ++i) {
      double expected = applyReal(op, decode(a[i]), decode(b[i]));
      double got = decode(out[i]);
      if (std::isinf(got)) {
        // Overflow to infinity is right when the exact result is beyond the largest finite value.
        ASSERT_GT(std::abs(expected), dtype == DataType::Float16 ? 65504.0 : 3.3e38) << toString(op) << " at " << i;
        continue;
      }
      // One rounding to the narrow type: half an ulp, relative (plus the smallest subnormal step).
      double tolerance = epsilon * std::abs(expected) + (dtype == DataType::Float16 ? std::ldexp(1.0, -24) : 1e-40);
      ASSERT_NEAR(got, expected, tolerance) << toString(dtype) << " " << toString(op) << " at " << i;
    }
  }
}

TEST(Reduce, Float16RoundsOnceFromFloat) {
  checkHalfType(DataType::Float16, halfToDouble, 0x7c00, std::ldexp(1.0, -11));
}
TEST(Reduce, BFloat16RoundsOnceFromFloat) {
  checkHalfType(DataType::BFloat16, bf16ToDouble, 0x7f80, std::ldexp(1.0, -8));
}

template <typename T>
void checkInteger(DataType dtype) {
  std::mt19937_64 rng(3);
  std::vector<T> a(kCount), b(kCount), out(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    a[i] = T(rng());
    b[i] = T(rng());
  }
  for (ReduceOp op : kAll) {
    reduce(out.data(), a.data(), b.data(), kCount, dtype, op);
    for (size_t i = 0; i < kCount; ++i) {
      // Wide unsigned arithmetic, truncated: the wrap-around torch's integer tensors have.
      uint64_t x = uint64_t(int64_t(a[i])), y = uint64_t(int64_t(b[i]));
      T expected;
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg: expected = T(x + y); break;
        case ReduceOp::Product: expected = T(x * y); break;
        case ReduceOp::Min: expected = std::min(a[i], b[i]); break;
        case ReduceOp::Max: expected = std::max(a[i], b[i]); break;
        case ReduceOp::BAnd: expected = T(x & y); break;
        case ReduceOp::BOr: expected = T(x | y); break;
        case ReduceOp::BXor: expected = T(x ^ y); break;
      }
      ASSERT_EQ(out[i], expected) << toString(dtype) << " " << toString(op) << " at " << i;
    }
  }
}

TEST(Reduce, IntegersWrapLikeTorch) {
  checkInteger<int8_t>(DataType::Int8);
  checkInteger<int16_t>(DataType::Int16);
  checkInteger<int32_t>(DataType::Int32);
  checkInteger<int64_t>(DataType::Int64);
  checkInteger<uint8_t>(DataType::UInt8);
}

TEST(Reduce, BoolIsLogical) {
  uint8_t a[4] = {0, 0, 1, 1}, b[4] = {0, 1, 0, 1}, out[4];
  auto run = [&](ReduceOp op) {
    reduce(out, a, b, 4, DataType::Bool, op);
    return std::vector<uint8_t>(out, out + 4);
  };
  EXPECT_EQ(run(ReduceOp::Sum), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(run(ReduceOp::Max), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(run(ReduceOp::BOr), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(run(ReduceOp::Product), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(run(ReduceOp::Min), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(run(ReduceOp::BAnd), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(run(ReduceOp::BXor), (std::vector<uint8_t>{0, 1, 1, 0}));
}

TEST(Reduce, ComplexSumAndProduct) {
  std::vector<std::complex<double>> a(kCount), b(kCount), out(kCount);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> uniform(-3, 3);
  for (size_t i = 0; i < kCount; ++i) {
    a[i] = {uniform(rng), uniform(rng)};
    b[i] = {uniform(rng), uniform(rng)};
  }
  reduce(out.data(), a.data(), b.data(), kCount, DataType::Complex128, ReduceOp::Sum);
  for (size_t i = 0; i < kCount; ++i) ASSERT_NEAR(std::abs(out[i] - (a[i] + b[i])), 0.0, 1e-12);
  reduce(out.data(), a.data(), b.data(), kCount, DataType::Complex128, ReduceOp::Product);
  for (size_t i = 0; i < kCount; ++i) ASSERT_NEAR(std::abs(out[i] - a[i] * b[i]), 0.0, 1e-12);

  std::vector<std::complex<float>> fa{{1, 2}, {3, -1}}, fb{{0.5f, -2}, {2, 2}}, fout(2);
  reduce(fout.data(), fa.data(), fb.data(), 2, DataType::Complex64, ReduceOp::Product);
  EXPECT_EQ(fout[0], std::complex<float>(4.5f, -1.0f));
  EXPECT_EQ(fout[1], std::complex<float>(8.0f, 4.0f));
}

TEST(Reduce, MinAndMaxPropagateNaNWhicheverSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float a[3] = {nan, 1.0f, 2.0f}, b[3] = {1.0f, nan, 3.0f}, out[3];
  for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) {
    reduce(out, a, b, 3, DataType::Float32, op);
    EXPECT_TRUE(std::isnan(out[0])) << toString(op);
    EXPECT_TRUE(std::isnan(out[1])) << toString(op);
    EXPECT_EQ(out[2], op == ReduceOp::Min ? 2.0f : 3.0f);
  }
}

TEST(Reduce, ReducingInPlaceAliasesTheDestination) {
  std::vector<int32_t> a(kCount, 5), b(kCount, 7);
  reduce(a.data(), a.data(), b.data(), kCount, DataType::Int32, ReduceOp::Sum);
  for (auto v : a) ASSERT_EQ(v, 12);
}

TEST(Reduce, FinishAverageDividesAndTruncatesIntegers) {
  std::vector<float> f{3.0f, -7.5f, 1.0f};
  finishAverage(f.data(), f.size(), DataType::Float32, 3);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_FLOAT_EQ(f[1], -2.5f);
  EXPECT_FLOAT_EQ(f[2], 1.0f / 3.0f);
  std::vector<int64_t> i{7, -7, 2};
  finishAverage(i.data(), i.size(), DataType::Int64, 2);
  EXPECT_EQ(i, (std::vector<int64_t>{3, -3, 1}));
  std::vector<std::complex<double>> c{{4, -2}};
  finishAverage(c.data(), 1, DataType::Complex128, 4);
  EXPECT_EQ(c[0], std::complex<double>(1, -0.5));
}

TEST(Reduce, ScaleMultipliesFloatingTypes) {
  std::vector<double> d{1.5, -2, 0};
  std::vector<double> out(3);
  scale(out.data(), d.data(), 3, DataType::Float64, 0.25);
  EXPECT_EQ(out, (std::vector<double>{0.375, -0.5, 0}));
  std::vector<uint16_t> bf{0x3f80 /* 1.0 */, 0xc000 /* -2.0 */};
  scale(bf.data(), bf.data(), 2, DataType::BFloat16, 3.0);
  EXPECT_EQ(bf16ToDouble(bf[0]), 3.0);
  EXPECT_EQ(bf16ToDouble(bf[1]), -6.0);
}

TEST(Reduce, UnsupportedPairsAreExplained) {
  EXPECT_TRUE(unsupportedReason(ReduceOp::BAnd, DataType::Float32).has_value());
  EXPECT_TRUE(unsupportedReason(ReduceOp::BXor, DataType::Complex64).has_value());
  EXPECT_TRUE(unsupportedReason(ReduceOp::Max, DataType::Complex128).has_value());
  EXPECT_TRUE(unsupportedReason(ReduceOp::Avg, DataType::Bool).has_value());
  EXPECT_FALSE(unsupportedReason(ReduceOp::BAnd, DataType::Int8).has_value());
  EXPECT_FALSE(unsupportedReason(ReduceOp::Avg, DataType::Int32).has_value());
  EXPECT_FALSE(unsupportedReason(ReduceOp::Product, DataType::Complex64).has_value());
  EXPECT_NE(std::string(reduceKernelFlavour()), "");
}

}  // namespace
}  // namespace hier::transport
