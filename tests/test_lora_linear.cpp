// lora_linear, the fused LoRA layer: against the composition it replaces (linear + the adapters'
// linears + add), in float32 and with float32 adapters on a bfloat16 layer (peft's mixed
// precision: dA / dB in float32, dx in bfloat16); what it keeps for backward; that LoRALinear
// uses it; and the float32-from-bfloat16 GEMM it relies on. GPU cases skip without a device.
#include <gtest/gtest.h>

#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/detail/dispatch.h"
#include "ops/gemm_kernels.h"
#include "ops/linear.h"
#include "ops/lora_linear.h"
#include "ops/reduce.h"
#include "ops/matmul.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "nn/init.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg {
namespace {

struct Run {
  Tensor y, dx, da, db;
};

// y = f(x, W, A, B) and the gradients of x, A and B (W frozen) against dy.
template <class F>
Run run(F&& f, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b, const Tensor& dy) {
  Tensor lx = x.detach().requires_grad_(true), la = a.detach().requires_grad_(true),
         lb = b.detach().requires_grad_(true);
  Tensor y = f(lx, w.detach(), la, lb);
  y.backward(dy);
  return {y.detach(), lx.grad(), la.grad(), lb.grad()};
}

// What LoRALinear computed before the fused op: x cast to the adapters' dtype, two linears,
// the LoRA term scaled and rounded back to x's dtype, added.
Tensor composition(const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b, double s) {
  Tensor lora = linear(linear(to(x, a.dtype()), a), b);
  return add(linear(x, w), to(mul(lora, s), x.dtype()));
}

Tensor fused(const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b, double s) {
  return lora_linear(x, w, Tensor(), a, b, s);
}

void check(Device dev, DType layer, double tol) {
  SCOPED_TRACE(dev.str() + " " + dtype_name(layer));
  Generator gen(1);
  // Weights of 0.2 (as trained layers): y and the LoRA term of order 1, so 5e-2 is many bf16 ulps.
  auto draw = [&](const Shape& s, DType dt, double scale = 0.2) { return to(mul(randn(s, gen), scale), dt, dev); };
  Tensor x = draw({3, 7, 24}, layer, 1.0), w = draw({16, 24}, layer), dy = draw({3, 7, 16}, layer, 1.0);
  Tensor a = draw({4, 24}, kFloat32), b = draw({16, 4}, kFloat32);  // float32 adapters
  if (layer != kBFloat16) a = to(a, layer), b = to(b, layer);
  KernelTrace trace;
  Run got = run([](const auto& x, const auto& w, const auto& a, const auto& b) { return fused(x, w, a, b, 2.0); }, x, w, a, b, dy);
  if (dev.is_cuda() && layer == kBFloat16) {  // no float32 GEMM on CUDA cores for a bf16 layer
    EXPECT_FALSE(trace.contains("gemm.cublas_f32"));
    EXPECT_TRUE(trace.contains("gemm.cublas_bf16_f32out"));  // dA and dB: bf16 products into float32
  }
  EXPECT_TRUE(trace.contains("lora_linear.dx") && trace.contains("lora_linear.dA") && trace.contains("lora_linear.dB"));
  EXPECT_FALSE(trace.contains("lora_linear.dweight_gemm"));
  // The reference: the composition in float64 on the same (rounded) values.
  auto f64 = [](const Tensor& t) { return to(t, kFloat64, Device::cpu()); };
  Run want = run([](const auto& x, const auto& w, const auto& a, const auto& b) { return composition(x, w, a, b, 2.0); }, f64(x), f64(w),
                 f64(a), f64(b), f64(dy));
  EXPECT_EQ(got.y.dtype(), layer);
  EXPECT_EQ(got.dx.dtype(), layer);
  EXPECT_EQ(got.da.dtype(), a.dtype());
  EXPECT_EQ(got.db.dtype(), b.dtype());
  EXPECT_TENSOR_NEAR(f64(got.y), want.y, tol, tol);
  EXPECT_TENSOR_NEAR(f64(got.dx), want.dx, tol, tol);
  EXPECT_TENSOR_NEAR(f64(got.da), want.da, tol, tol);
  EXPECT_TENSOR_NEAR(f64(got.db), want.db, tol, tol);
}

TEST(LoraLinear, MatchesTheCompositionOnTheCpu) {
  check(Device::cpu(), kFloat32, 1e-4);
  check(Device::cpu(), kBFloat16, 5e-2);
}

TEST(LoraLinear, MatchesTheCompositionOnTheGpu) {
  TG_REQUIRE_CUDA();
  check(Device::cuda(), kFloat32, 1e-4);
  check(Device::cuda(), kBFloat16, 5e-2);
}

TEST(LoraLinear, KeepsOnlyWhatTheWantedGradientsNeed) {
  Generator gen(2);
  const int64_t N = 10, in = 12, out = 8, r = 2;
  Tensor w = randn({out, in}, gen), a = randn({r, in}, gen).requires_grad_(true);
  Tensor b = randn({out, r}, gen).requires_grad_(true);
  // The LoRA case: frozen W, trainable A and B, x from an earlier layer: x, x A^T and the weights.
  Tensor x = randn({N, in}, gen).requires_grad_(true);
  Tensor y = lora_linear(x, w, Tensor(), a, b, 2.0);
  const size_t params = w.nbytes() + a.nbytes() + b.nbytes();
  EXPECT_EQ(y.grad_fn()->saved_bytes(), x.nbytes() + N * r * sizeof(float) + params);
  // Only B trains: x A^T alone, not x, W, A or B.
  a.requires_grad_(false);
  Tensor x0 = randn({N, in}, gen);
  Tensor y2 = lora_linear(x0, w, Tensor(), a, b, 2.0);
  EXPECT_EQ(y2.grad_fn()->saved_bytes(), N * r * sizeof(float));
}

TEST(LoraLinear, BadArgumentsAreNamed) {
  Generator gen(3);
  Tensor x = randn({4, 6}, gen), w = randn({5, 6}, gen), a = randn({2, 6}, gen), b = randn({5, 2}, gen);
  EXPECT_ERROR_HAS(lora_linear(x, w, Tensor(), randn({2, 7}, gen), b, 1.0), "lora_linear", "lora_A must be [r, 6]");
  EXPECT_ERROR_HAS(lora_linear(x, w, Tensor(), a, randn({5, 3}, gen), 1.0), "lora_linear", "lora_B must be [5, 2]");
  EXPECT_ERROR_HAS(lora_linear(x, w, Tensor(), to(a, kFloat64), to(b, kFloat64), 1.0), "lora_linear",
                   "adapters of dtype float64 on a float32 layer");
  EXPECT_ERROR_HAS(lora_linear(x, w, Tensor(), a, to(b, kFloat64), 1.0), "lora_A and lora_B differ in dtype");
}

TEST(LoraLinear, LoraLinearLayersUseIt) {
  Generator gen(4);
  nn::Linear base(24, 16, false, gen);
  peft::LoRALinear layer(base, 4, 8.0, 0.0, gen);
  nn::init::normal_(layer.lora_B->weight, 0.0, 0.1, gen);
  Tensor x = randn({5, 24}, gen);
  KernelTrace trace;
  Tensor y = layer.forward(x);
  EXPECT_TRUE(trace.contains("lora_linear"));
  EXPECT_TENSOR_NEAR(y, composition(x, base.weight, layer.lora_A->weight, layer.lora_B->weight, 2.0), 1e-5, 1e-5);
  // Dropout on the adapters' input keeps the composition (the base layer sees x undropped).
  peft::LoRALinear dropped(base, 4, 8.0, 0.5, gen);
  dropped.train(true);
  KernelTrace trace2;
  dropped.forward(x);
  EXPECT_FALSE(trace2.contains("lora_linear"));
}

// Backward from the outputs ys with a fixed random dy each (drawn from `seed`).
void backward_against_random(const std::vector<Tensor>& ys, uint64_t seed) {
  Generator g(seed);
  Tensor loss;
  for (const Tensor& y : ys) {
    Tensor term = sum(mul(y, to(randn(y.shape(), g), y.dtype(), y.device())));
    loss = loss.defined() ? add(loss, term) : term;
  }
  loss.backward();
}

// A group of large weights (over 8 MiB together) runs a base GEMM a part, each into its columns of
// the output, instead of concatenating the weights: the same outputs and gradients as the layers
// alone. Part 0 has LoRA, part 1 a bias, part 2 neither (its GEMM writes its columns unzeroed).
void check_large_group(Device dev, DType dtype, double tol) {
  SCOPED_TRACE(dev.str() + " " + dtype_name(dtype));
  Generator gen(5);
  const int64_t in = 1024, k = dtype == kBFloat16 ? 2 : 1;  // over 8 MiB in either dtype
  auto draw = [&](const Shape& s, DType dt, double scale) { return to(mul(randn(s, gen), scale), dt, dev); };
  Tensor x = draw({3, 5, in}, dtype, 1.0), w0 = draw({1100 * k, in}, dtype, 0.03);
  Tensor w1 = draw({1200 * k, in}, dtype, 0.03), w2 = draw({300 * k, in}, dtype, 0.03), b1 = draw({1200 * k}, dtype, 0.5);
  Tensor a = draw({4, in}, kFloat32, 0.03), b = draw({1100 * k, 4}, kFloat32, 0.2);
  if (dtype != kBFloat16) a = to(a, dtype), b = to(b, dtype);
  ASSERT_GT((w0.numel() + w1.numel() + w2.numel()) * w0.element_size(), int64_t{8} << 20);
  auto grads = [&](auto&& f) {  // outputs and the gradients of x, A, B and the bias against a fixed dy
    Tensor lx = x.detach().requires_grad_(true), la = a.detach().requires_grad_(true),
           lb = b.detach().requires_grad_(true), lb1 = b1.detach().requires_grad_(true);
    std::vector<Tensor> ys = f(lx, la, lb, lb1);
    backward_against_random(ys, 6);
    std::vector<Tensor> out;
    for (const Tensor& y : ys) out.push_back(y.detach());
    for (const Tensor& t : {lx, la, lb, lb1}) out.push_back(t.grad());
    return out;
  };
  KernelTrace trace;
  std::vector<Tensor> got = grads([&](const Tensor& x, const Tensor& a, const Tensor& b, const Tensor& b1) {
    return linear_group(x, {{w0, Tensor(), a, b, 2.0}, {w1, b1}, {w2}});
  });
  EXPECT_TRUE(trace.contains("linear_group.gemm_a_part")) << trace.str();
  std::vector<Tensor> want = grads([&](const Tensor& x, const Tensor& a, const Tensor& b, const Tensor& b1) {
    return std::vector<Tensor>{lora_linear(x, w0, Tensor(), a, b, 2.0), linear(x, w1, b1), linear(x, w2)};
  });
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TENSOR_NEAR(got[i], want[i], tol, tol) << "output / gradient " << i;
}

TEST(LinearGroup, LargeWeightsRunAGemmAPartAsTheLayersAloneOnTheCpu) { check_large_group(Device::cpu(), kFloat32, 1e-5); }

TEST(LinearGroup, LargeWeightsRunAGemmAPartAsTheLayersAloneOnTheGpu) {
  TG_REQUIRE_CUDA();
  check_large_group(Device::cuda(), kFloat32, 1e-4);
  check_large_group(Device::cuda(), kBFloat16, 2e-2);
}

// Weights that are consecutive row blocks of one allocation (nn::place_weights_adjacent) are read
// in place as one matrix: no concatenation, and the outputs and gradients of the concatenated
// copy's one GEMM, bitwise (the same GEMM on the same values).
void check_adjacent_group(Device dev, DType dtype) {
  SCOPED_TRACE(dev.str() + " " + dtype_name(dtype));
  Generator gen(8);
  const int64_t in = 96;
  auto draw = [&](const Shape& s, double scale) { return to(mul(randn(s, gen), scale), dtype, dev); };
  Tensor x = draw({2, 7, in}, 1.0), a = draw({4, in}, 0.1), b = draw({64, 4}, 0.2), b1 = draw({40}, 0.5);
  Tensor w[3] = {draw({64, in}, 0.1), draw({40, in}, 0.1), draw({24, in}, 0.1)};
  auto run = [&](const Tensor (&ws)[3], std::string& traced) {
    Tensor lx = x.detach().requires_grad_(true), la = a.detach().requires_grad_(true);
    KernelTrace trace;
    std::vector<Tensor> ys = linear_group(lx, {{ws[0], Tensor(), la, b, 2.0}, {ws[1], b1}, {ws[2]}});
    traced = trace.str();
    backward_against_random(ys, 9);
    ys.push_back(lx.grad());
    ys.push_back(la.grad());
    return ys;
  };
  std::string apart_trace, adjacent_trace;
  const std::vector<Tensor> apart = run(w, apart_trace);
  EXPECT_NE(apart_trace.find("linear_group.weights_concatenated"), std::string::npos) << apart_trace;
  Tensor all = cat({w[0], w[1], w[2]}, 0);
  const Tensor adjacent[3] = {all.as_strided({64, in}, {in, 1}, 0), all.as_strided({40, in}, {in, 1}, 64 * in),
                              all.as_strided({24, in}, {in, 1}, 104 * in)};
  const std::vector<Tensor> got = run(adjacent, adjacent_trace);
  EXPECT_EQ(adjacent_trace.find("weights_concatenated"), std::string::npos) << adjacent_trace;
  EXPECT_EQ(adjacent_trace.find("gemm_a_part"), std::string::npos) << adjacent_trace;
  ASSERT_EQ(got.size(), apart.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TENSOR_EQ(got[i], apart[i]) << "output / gradient " << i;
}

TEST(LinearGroup, AdjacentWeightsAreOneMatrixReadInPlaceOnTheCpu) { check_adjacent_group(Device::cpu(), kFloat32); }

TEST(LinearGroup, AdjacentWeightsAreOneMatrixReadInPlaceOnTheGpu) {
  TG_REQUIRE_CUDA();
  check_adjacent_group(Device::cuda(), kFloat32);
  check_adjacent_group(Device::cuda(), kBFloat16);
}

TEST(Gemm, Float32FromBfloat16OperandsIsTheProductOfTheRoundedValues) {
  Generator gen(5);
  for (Device dev : {Device::cpu(), Device::cuda()}) {
    if (dev.is_cuda() && !testing::cuda_ready()) continue;
    Tensor a = to(randn({1, 33, 70}, gen), kBFloat16, dev), b = to(randn({1, 70, 19}, gen), kBFloat16, dev);
    Tensor c = Tensor::empty({1, 33, 19}, {kFloat32, dev});
    TG_DISPATCH(dev, gemm, c, a, b, 1.5, 0.0);
    Tensor want = mul(matmul(to(a, kFloat64, Device::cpu()), to(b, kFloat64, Device::cpu())), 1.5);
    EXPECT_TENSOR_NEAR(to(c, kFloat64, Device::cpu()), want, 1e-5, 1e-5);
  }
}

}  // namespace
}  // namespace tg
