// Op cases: silu_mul (fused on the CPU), and a test against the composition it replaces.
#include <gtest/gtest.h>

#include "core/factory.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/swiglu.h"
#include "ops/unary.h"
#include "testing/testing.h"
#include "tests/op_harness.h"

namespace tg::test {
namespace {

using S = InputSpec;

TG_OP_CASES({
    {"silu_mul", {S{{7, 33}}, S{{7, 33}}}, [](const Inputs& x) { return silu_mul(x[0], x[1]); }},
    {"silu_mul_strided", {S{{6, 9}, S::Normal, 0, true, true}, S{{6, 9}}},
     [](const Inputs& x) { return silu_mul(x[0], x[1]); }},
});

TEST(SiluMul, FusedMatchesTheComposition) {
  Generator gen(3);
  Tensor a = randn({64, 345}, gen, {kFloat32, Device::cpu(), true}), b = randn({64, 345}, gen, {kFloat32, Device::cpu(), true});
  Tensor a2 = a.detach().requires_grad_(true), b2 = b.detach().requires_grad_(true);
  Tensor g = randn({64, 345}, gen);
  KernelTrace trace;
  Tensor y = silu_mul(a, b);
  EXPECT_TRUE(trace.contains("silu_mul.fused_cpu"));
  y.backward(g);
  Tensor want = mul(silu(a2), b2);
  want.backward(g);
  EXPECT_TENSOR_NEAR(y, want, 1e-6, 1e-6);
  EXPECT_TENSOR_NEAR(a.grad(), a2.grad(), 1e-6, 1e-6);
  EXPECT_TENSOR_NEAR(b.grad(), b2.grad(), 1e-6, 1e-6);
  EXPECT_THROW(silu_mul(a, randn({64, 344}, gen)), Error);
}

}  // namespace
}  // namespace tg::test
