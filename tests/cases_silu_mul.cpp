// Op cases: silu_mul (fused on the CPU), and a test against the composition it replaces.
#include <gtest/gtest.h>

#include "core/factory.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/silu_mul.h"
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
    // gate and up as the column blocks of one [.., 2 x 40] projection, read at its row stride
    // (40: whole 16-byte packs on the GPU), and at an odd width (scalars).
    {"silu_mul_column_blocks", {S{{2, 3, 80}}},
     [](const Inputs& x) { return silu_mul(slice(x[0], 2, 0, 40), slice(x[0], 2, 40, 80)); }},
    {"silu_mul_column_blocks_odd", {S{{5, 22}}},
     [](const Inputs& x) { return silu_mul(slice(x[0], 1, 0, 11), slice(x[0], 1, 11, 22)); }},
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

// Scalars and empty tensors keep their shapes through the [rows, cols] views the kernels take.
TEST(SiluMul, ScalarAndEmptyInputs) {
  Tensor a = full({}, 0.5, {kFloat32, Device::cpu(), true}), b = full({}, 2.0);
  Tensor y = silu_mul(a, b);
  EXPECT_EQ(y.shape(), Shape{});
  y.backward();
  EXPECT_TENSOR_NEAR(y, mul(silu(a.detach()), b), 1e-6, 1e-6);
  EXPECT_EQ(a.grad().shape(), Shape{});
  Tensor e = zeros({0, 3}).requires_grad_(true);
  Tensor ye = silu_mul(e, zeros({0, 3}));
  EXPECT_EQ(ye.shape(), (Shape{0, 3}));
  sum(ye).backward();
  EXPECT_EQ(e.grad().shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace tg::test
