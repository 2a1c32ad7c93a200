// fast_exp (core/detail/fast_exp.h) against std::exp in double: error in ulps over a sweep of the
// whole float range, the special values, and the overflow / underflow boundaries.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/detail/fast_exp.h"

namespace tg {
namespace {

// |got - exact| in units of the last place of the float nearest to exact (the subnormal ulp
// below FLT_MIN).
double ulps(float got, double exact) {
  const float rounded = static_cast<float>(exact);
  const double ulp = rounded >= FLT_MIN ? std::ldexp(1.0, std::ilogb(rounded) - 23) : std::ldexp(1.0, -149);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

TEST(FastExp, WithinTwoUlpsOverTheWholeFloatRange) {
  // Every 251st bit pattern (prime, so every exponent and many mantissas): ~17M values.
  double worst = 0, worst_subnormal = 0;
  float worst_x = 0;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 251) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(bits));
    const float y = fast_exp(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(y)) << "x = " << x;
      continue;
    }
    const double exact = std::exp(static_cast<double>(x));
    const float rounded = static_cast<float>(exact);
    if (std::isinf(rounded)) {
      ASSERT_EQ(y, rounded) << "x = " << x;  // overflow to +inf exactly where std::exp does
      continue;
    }
    const double e = ulps(y, exact);
    if (rounded >= FLT_MIN) {
      if (e > worst) worst = e, worst_x = x;
    } else {
      worst_subnormal = std::max(worst_subnormal, e);
    }
  }
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
  EXPECT_LE(worst_subnormal, 1.0);
}

TEST(FastExp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-inf), 0.0f);
  EXPECT_EQ(fast_exp(inf), inf);
  EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(fast_exp(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(fast_exp(1e30f), inf);
  EXPECT_EQ(fast_exp(-1e30f), 0.0f);
  EXPECT_EQ(fast_exp(FLT_MIN), 1.0f);
  EXPECT_EQ(fast_exp(std::numeric_limits<float>::denorm_min()), 1.0f);
  EXPECT_NEAR(fast_exp(1.0f), 2.718281828f, 3e-7f);
}

TEST(FastExp, OverflowAndUnderflowBoundaries) {
  // ln(FLT_MAX) = 88.7228391...: the float below it is finite, the float above it overflows.
  const float top = 88.72283f;
  EXPECT_TRUE(std::isfinite(fast_exp(top)));
  EXPECT_LE(ulps(fast_exp(top), std::exp(static_cast<double>(top))), 2.0);
  EXPECT_EQ(fast_exp(88.7229f), std::numeric_limits<float>::infinity());
  // The subnormal range, down to the smallest subnormal 2^-149 (e^-103.28) and then 0.
  for (float x : {-87.5f, -90.0f, -95.0f, -100.0f, -103.0f, -103.2f}) {
    SCOPED_TRACE(x);
    EXPECT_GT(fast_exp(x), 0.0f);
    EXPECT_LE(ulps(fast_exp(x), std::exp(static_cast<double>(x))), 1.0);
  }
  EXPECT_EQ(fast_exp(-104.0f), 0.0f);
  EXPECT_EQ(fast_exp(-200.0f), 0.0f);
}

TEST(FastExp, VectorLoopMatchesScalarCalls) {
  // The form the kernels use: a loop the compiler vectorises gives the same bits as one call.
  float xs[67], ys[67];
  for (int i = 0; i < 67; ++i) xs[i] = -90.0f + 2.7f * static_cast<float>(i);
  for (int i = 0; i < 67; ++i) ys[i] = fast_exp(xs[i]);
  for (int i = 0; i < 67; ++i) {
    volatile float x = xs[i];
    EXPECT_EQ(ys[i], fast_exp(x)) << "x = " << xs[i];
  }
}

}  // namespace
}  // namespace tg
