// GoogleTest helpers for testing tapegrad modules (link tapegrad::testing):
//   EXPECT_TENSOR_NEAR(got, want, rtol, atol)  fails with the shape, the worst index and values
//   EXPECT_TENSOR_EQ(got, want)                 bitwise equality (same dtype and shape)
//   EXPECT_GRADCHECK(fn, wrt)                   tg::testing::gradcheck passes
//   class MyTest : public tg::testing::SeededTest  a Generator `gen` seeded per test
#pragma once

#include <gtest/gtest.h>

#include "core/generator.h"
#include "core/tensor.h"
#include "testing/gradcheck.h"

namespace tg::testing {

::testing::AssertionResult tensors_near(const char* got_expr, const char* want_expr, const char*,
                                        const char*, const Tensor& got, const Tensor& want,
                                        double rtol, double atol);
::testing::AssertionResult tensors_equal(const char* got_expr, const char* want_expr,
                                         const Tensor& got, const Tensor& want);

// Each test gets its own Generator, seeded from the test's name: reproducible, and different
// tests draw different numbers.
class SeededTest : public ::testing::Test {
 protected:
  SeededTest();
  Generator gen;
};

// True when a CUDA device can run the GPU tests; otherwise the caller should GTEST_SKIP.
bool cuda_ready();

}  // namespace tg::testing

#define EXPECT_TENSOR_NEAR(got, want, rtol, atol) \
  EXPECT_PRED_FORMAT4(::tg::testing::tensors_near, got, want, rtol, atol)
#define ASSERT_TENSOR_NEAR(got, want, rtol, atol) \
  ASSERT_PRED_FORMAT4(::tg::testing::tensors_near, got, want, rtol, atol)
#define EXPECT_TENSOR_EQ(got, want) EXPECT_PRED_FORMAT2(::tg::testing::tensors_equal, got, want)
#define EXPECT_GRADCHECK(fn, ...)                                         \
  do {                                                                    \
    auto tg_gc_result = ::tg::testing::gradcheck(fn, __VA_ARGS__);        \
    EXPECT_TRUE(tg_gc_result.ok) << tg_gc_result.report;                  \
  } while (0)
// Skips the current test, with the reason, when no GPU can run it.
#define TG_REQUIRE_CUDA()                                                                   \
  do {                                                                                      \
    if (!::tg::testing::cuda_ready())                                                       \
      GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped"; \
  } while (0)
