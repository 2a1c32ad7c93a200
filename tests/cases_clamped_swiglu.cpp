// Op cases: clamped_swiglu (gpt-oss's expert activation), and a test against the composition of
// transformers' GptOssExperts it replaces.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/clamped_swiglu.h"
#include "ops/masked_fill.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "testing/testing.h"
#include "tests/op_harness.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

using S = InputSpec;

// limit 0.8: a standard normal input clamps about two values in five, so both branches are checked
TG_OP_CASES({
    {"clamped_swiglu", {S{{7, 2 * 13}}}, [](const Inputs& x) { return clamped_swiglu(x[0], 1.702, 0.8); }},
    {"clamped_swiglu_3d", {S{{2, 3, 2 * 5}}}, [](const Inputs& x) { return clamped_swiglu(x[0], 0.5, 1.5); }},
    // the [n, 2I] rows of a wider projection, read at its row stride
    {"clamped_swiglu_row_stride", {S{{6, 30}}},
     [](const Inputs& x) { return clamped_swiglu(slice(x[0], 1, 0, 2 * 11), 1.702, 0.8); }},
});

// transformers' GptOssExperts: gate = gate.clamp(max=limit), up = up.clamp(-limit, limit),
// (up + 1) * gate * sigmoid(gate * alpha), gate and up the even and odd columns.
TEST(ClampedSwiglu, MatchesTheComposition) {
  Generator gen(4);
  Tensor x = mul(randn({33, 2 * 17}, gen, {kFloat64}), 2.0).requires_grad_(true);
  Tensor x2 = x.detach().requires_grad_(true);
  const Tensor g = randn({33, 17}, gen, {kFloat64});
  const double alpha = 1.702, limit = 1.5;
  Tensor y = clamped_swiglu(x, alpha, limit);
  y.backward(g);
  auto above = [](const Tensor& t, double v) {  // true where t > v, no gradient
    NoGradGuard no_grad;
    return to(relu(sub(t.detach(), v)), kBool);
  };
  Tensor gate = slice(x2, 1, 0, 34, 2), up = slice(x2, 1, 1, 34, 2);
  gate = masked_fill(gate, above(gate, limit), limit);
  up = masked_fill(up, above(up, limit), limit);
  up = masked_fill(up, above(neg(up.detach()), limit), -limit);
  Tensor want = mul(add(up, 1.0), mul(gate, sigmoid(mul(gate, alpha))));
  want.backward(g);
  EXPECT_TENSOR_NEAR(y, want, 1e-12, 1e-12);
  EXPECT_TENSOR_NEAR(x.grad(), x2.grad(), 1e-12, 1e-12);
  EXPECT_ERROR_HAS(clamped_swiglu(zeros({3, 5}), 1.0, 1.0), "clamped_swiglu", "even dim", "[3, 5]");
  EXPECT_ERROR_HAS(clamped_swiglu(zeros({3, 4}), 1.0, -1.0), "clamped_swiglu", "limit", "-1");
  EXPECT_ERROR_HAS(clamped_swiglu(zeros({3, 4}, {kInt64}), 1.0, 1.0), "clamped_swiglu", "gate_up");
}

}  // namespace
}  // namespace tg::test
