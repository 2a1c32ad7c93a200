// linear_cross_entropy against linear + cross_entropy (in chunks of any size, ignore_index,
// frozen weight: no dW), the chunk sizes it chooses, the models' loss through it, and its
// argument checks. GPU parity: the op harness (cases_nn_ops.cpp), the bf16 cases here and the
// CUDA kernel of the chunks (cross_entropy_with_grad: row-once and two-read) against the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/trace.h"
#include "nn/loss.h"
#include "nn/models/gpt2.h"
#include "nn/models/llama.h"
#include "ops/binary.h"
#include "ops/binary_kernels.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/cross_entropy_kernels.h"
#include "ops/detail/dispatch.h"
#include "ops/detail/linear_cross_entropy_chunks.h"
#include "ops/linear.h"
#include "ops/linear_cross_entropy.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg {
namespace {

struct LossRun {
  Tensor loss, dx, dw;
};

template <class F>
LossRun run(F&& f, const Tensor& x, const Tensor& w, const Tensor& t, bool w_grad) {
  Tensor lx = x.detach().requires_grad_(true), lw = w.detach().requires_grad_(w_grad);
  Tensor loss = f(lx, lw, t);
  loss.backward(full({}, 1.7, loss.options()));  // a gradient other than 1 reaches the scale
  return {loss.detach(), lx.grad(), lw.grad()};
}

Tensor reference(const Tensor& x, const Tensor& w, const Tensor& t) { return cross_entropy(to(linear(x, w), kFloat32), t); }

TEST(LinearCrossEntropy, MatchesLinearThenCrossEntropyInAnyChunks) {
  // 600 rows: one chunk (the op's choice here), chunks of 256 and of 97 (the last ones short).
  Generator gen(1);
  const int64_t N = 600, H = 64, V = 70000;
  Tensor x = randn({N, H}, gen), w = randn({V, H}, gen);
  std::vector<int64_t> tv = randint(0, V, {N}, gen).to_vector<int64_t>();
  tv[3] = tv[500] = -100;  // ignored rows add no loss and no gradient
  Tensor t = from_vector(tv, {N});
  for (bool w_grad : {true, false}) {
    LossRun want = run([](const auto& x, const auto& w, const auto& t) { return reference(x, w, t); }, x, w, t, w_grad);
    for (int64_t chunk : {int64_t{0}, int64_t{256}, int64_t{97}}) {
      SCOPED_TRACE(std::string(w_grad ? "trainable" : "frozen") + " weight, chunks of " + std::to_string(chunk));
      KernelTrace trace;
      LossRun got = run([chunk](const auto& x, const auto& w, const auto& t) {
        return detail::linear_cross_entropy_chunked(x, w, t, -100, Reduction::Mean, chunk);
      }, x, w, t, w_grad);
      EXPECT_EQ(trace.contains("linear_cross_entropy.dx_dweight"), w_grad);
      EXPECT_EQ(trace.contains("linear_cross_entropy.dx"), !w_grad);
      EXPECT_TENSOR_NEAR(got.loss, want.loss, 1e-5, 1e-5);
      EXPECT_TENSOR_NEAR(got.dx, want.dx, 1e-5, 1e-6);
      EXPECT_EQ(got.dw.defined(), w_grad);
      if (w_grad) EXPECT_TENSOR_NEAR(got.dw, want.dw, 1e-5, 1e-6);
    }
  }
}

TEST(LinearCrossEntropy, ChunksOf2048RowsAtMost256MiBOfLogitsOr4096WithDw) {
  using detail::linear_cross_entropy_chunk_rows;
  EXPECT_EQ(linear_cross_entropy_chunk_rows(8192, 32000, 2, false), 2048);
  EXPECT_EQ(linear_cross_entropy_chunk_rows(8192, 32000, 2, true), 4096);
  EXPECT_EQ(linear_cross_entropy_chunk_rows(16384, 128256, 2, false), 1024);  // whole tiles under 256 MiB
  EXPECT_EQ(linear_cross_entropy_chunk_rows(16384, 128256, 2, true), 4096);
  EXPECT_EQ(linear_cross_entropy_chunk_rows(16384, 1 << 24, 4, false), 128);  // never under a tile
  EXPECT_EQ(linear_cross_entropy_chunk_rows(600, 70000, 4, true), 600);
  EXPECT_EQ(linear_cross_entropy_chunk_rows(0, 70000, 4, false), 1);
  EXPECT_ERROR_HAS(detail::linear_cross_entropy_chunked(ones({2, 3}), ones({4, 3}), from_vector(std::vector<int64_t>{0, 1}, {2}),
                                                        -100, Reduction::Mean, -1),
                   "linear_cross_entropy", "at least one row", "got -1");
}

TEST(LinearCrossEntropy, SumReductionAndNoGradMode) {
  Generator gen(2);
  Tensor x = randn({9, 5}, gen), w = randn({11, 5}, gen), t = randint(0, 11, {9}, gen);
  EXPECT_TENSOR_NEAR(linear_cross_entropy(x, w, t, -100, Reduction::Sum),
                     cross_entropy(linear(x, w), t, -100, Reduction::Sum), 1e-5, 1e-5);
  for (bool w_grad : {true, false}) {  // Sum's backward: no count to divide by
    const LossRun got = run([](const auto& x, const auto& w, const auto& t) {
      return linear_cross_entropy(x, w, t, -100, Reduction::Sum);
    }, x, w, t, w_grad);
    const LossRun want = run([](const auto& x, const auto& w, const auto& t) {
      return cross_entropy(linear(x, w), t, -100, Reduction::Sum);
    }, x, w, t, w_grad);
    EXPECT_TENSOR_NEAR(got.dx, want.dx, 1e-5, 1e-6);
    if (w_grad) EXPECT_TENSOR_NEAR(got.dw, want.dw, 1e-5, 1e-6);
  }
  NoGradGuard g;
  KernelTrace trace;
  Tensor xg = x.detach().requires_grad_(true);
  linear_cross_entropy(xg, w, t);
  EXPECT_TRUE(trace.contains("linear_cross_entropy.loss"));  // no gradient work without grad mode
}

TEST(LinearCrossEntropy, BadArgumentsAreNamed) {
  Generator gen(3);
  Tensor x = randn({4, 5}, gen), w = randn({7, 5}, gen), t = randint(0, 7, {4}, gen);
  EXPECT_ERROR_HAS(linear_cross_entropy(x, randn({7, 6}, gen), t), "linear_cross_entropy", "x [N, H] and weight [V, H]");
  EXPECT_ERROR_HAS(linear_cross_entropy(x, w, randint(0, 7, {3}, gen)), "'targets' must be [4]");
  EXPECT_ERROR_HAS(linear_cross_entropy(x, w, from_vector(std::vector<int64_t>{0, 9, 1, 2}, {4})), "target 9 (row 1)",
                   "out of range for 7 classes");
}

// Reduction::None: each row's -log p(target) and its gradients for a per-row incoming gradient,
// against linear + cross_entropy(None), in the op's chunks and in chunks of 97 rows; the
// trainable weight's gradients come from backward's second pass over the chunks.
TEST(LinearCrossEntropy, RowLossesMatchLinearThenCrossEntropyAndTheirGradients) {
  Generator gen(12);
  const int64_t N = 300, H = 32, V = 1000;
  Tensor x = randn({N, H}, gen), w = randn({V, H}, gen), dy = randn({N}, gen);
  std::vector<int64_t> tv = randint(0, V, {N}, gen).to_vector<int64_t>();
  tv[0] = tv[150] = -100;
  Tensor t = from_vector(tv, {N});
  auto rows_run = [&](auto&& f, bool w_grad) {
    Tensor lx = x.detach().requires_grad_(true), lw = w.detach().requires_grad_(w_grad);
    Tensor loss = f(lx, lw);
    loss.backward(dy);
    return LossRun{loss.detach(), lx.grad(), lw.grad()};
  };
  for (bool w_grad : {true, false}) {
    LossRun want = rows_run([&](const Tensor& lx, const Tensor& lw) {
      return cross_entropy(linear(lx, lw), t, -100, Reduction::None);
    }, w_grad);
    for (int64_t chunk : {int64_t{0}, int64_t{97}}) {
      SCOPED_TRACE(std::string(w_grad ? "trainable" : "frozen") + " weight, chunks of " + std::to_string(chunk));
      KernelTrace trace;
      LossRun got = rows_run([&](const Tensor& lx, const Tensor& lw) {
        return detail::linear_cross_entropy_chunked(lx, lw, t, -100, Reduction::None, chunk);
      }, w_grad);
      EXPECT_EQ(trace.contains("linear_cross_entropy.backward_recomputed"), w_grad);
      EXPECT_EQ(got.loss.shape(), Shape({N}));
      EXPECT_EQ(got.loss.to_vector<float>()[150], 0.0f);  // an ignored row
      EXPECT_TENSOR_NEAR(got.loss, want.loss, 1e-5, 1e-5);
      // float32 products summed in another order: |dx| ~ 0.1 here, |dW| ~ 1
      EXPECT_TENSOR_NEAR(got.dx, want.dx, 1e-4, 1e-5);
      EXPECT_EQ(got.dw.defined(), w_grad);
      if (w_grad) EXPECT_TENSOR_NEAR(got.dw, want.dw, 1e-4, 1e-5);
    }
  }
}

// Reduction::None under no-grad (a reference model's log-probs): the loss kernel alone, no node.
TEST(LinearCrossEntropy, RowLossesUnderNoGradRecordNothing) {
  Generator gen(13);
  Tensor x = randn({9, 5}, gen).requires_grad_(true), w = randn({11, 5}, gen).requires_grad_(true);
  Tensor t = randint(0, 11, {9}, gen);
  NoGradGuard g;
  KernelTrace trace;
  Tensor rows = linear_cross_entropy(x, w, t, -100, Reduction::None);
  EXPECT_TRUE(trace.contains("linear_cross_entropy.loss"));
  EXPECT_FALSE(rows.requires_grad());
  EXPECT_EQ(rows.grad_fn(), nullptr);
}

TEST(LinearCrossEntropy, ModelsLossTakesItAndMatchesTheLogitsPath) {
  Generator gen(4);
  nn::LlamaConfig cfg = nn::LlamaConfig::tiny();
  cfg.num_hidden_layers = 1;
  nn::LlamaForCausalLM llama(cfg, gen);
  Tensor ids = randint(0, cfg.vocab_size, {2, 9}, gen);
  KernelTrace trace;
  Tensor fused = llama.loss(ids, ids);
  EXPECT_TRUE(trace.contains("linear_cross_entropy.dx_dweight"));
  EXPECT_TENSOR_NEAR(fused, nn::causal_lm_loss(llama.forward(ids), ids), 1e-5, 1e-6);
  nn::GPT2Config gc = nn::GPT2Config::tiny();
  nn::GPT2LMHeadModel gpt2(gc, gen);
  Tensor gids = randint(0, gc.vocab_size, {2, 9}, gen);
  EXPECT_TENSOR_NEAR(gpt2.loss(gids, gids), nn::causal_lm_loss(gpt2.forward(gids), gids), 1e-5, 1e-6);
}

// A bfloat16 weight's dW is its float32 unit dW times the incoming scale, rounded once: the
// backends' binary with float32 operands and a bfloat16 out (one pass, no float32 copy), against
// the float32 product then rounded, bitwise, with the scale broadcast and operands strided.
TEST(LinearCrossEntropy, ScaledDwIsRoundedOnceIntoBfloat16OnEveryBackend) {
  Generator gen(9);
  const Tensor a = randn({37, 41}, gen), scale = full({}, 1.0 / 3.0), wide = randn({37, 82}, gen);
  for (Device dev : {Device::cpu(), Device::cuda()}) {
    if (dev.is_cuda() && !testing::cuda_ready()) continue;
    SCOPED_TRACE(dev.str());
    for (const Tensor& x : {a, slice(wide, 1, 3, 44)}) {  // contiguous, then a strided view
      const Tensor dx = to(x, dev), s = expand(to(scale, dev), x.shape());
      Tensor out = Tensor::empty(x.shape(), {kBFloat16, dev});
      TG_DISPATCH(dev, binary, BinaryOp::Mul, out, dx, s);
      EXPECT_TENSOR_EQ(to(out, Device::cpu()), to(mul(x, scale), kBFloat16));
    }
  }
}

TEST(LinearCrossEntropy, Bf16OnTheGpuMatchesTheFloat32Logits) {
  TG_REQUIRE_CUDA();
  Generator gen(5);
  // the op's chunks: frozen 2048 rows, then 952; trainable all 3000 at once; or 256 rows
  const int64_t N = 3000, H = 64, V = 32000;
  Tensor x = to(mul(randn({N, H}, gen), 0.3), kBFloat16, Device::cuda());
  Tensor w = to(mul(randn({V, H}, gen), 0.3), kBFloat16, Device::cuda());
  Tensor t = to(randint(0, V, {N}, gen), Device::cuda());
  for (bool w_grad : {false, true}) {
    LossRun want = run([](const auto& x, const auto& w, const auto& t) { return reference(x, w, t); }, x, w, t, w_grad);
    for (int64_t chunk : {int64_t{0}, int64_t{256}}) {
      SCOPED_TRACE(std::string(w_grad ? "trainable" : "frozen") + " weight, chunks of " + std::to_string(chunk));
      LossRun got = run([chunk](const auto& x, const auto& w, const auto& t) {
        return detail::linear_cross_entropy_chunked(x, w, t, -100, Reduction::Mean, chunk);
      }, x, w, t, w_grad);
      EXPECT_EQ(got.loss.dtype(), kFloat32);
      EXPECT_TENSOR_NEAR(got.loss, want.loss, 1e-3, 1e-3);
      EXPECT_TENSOR_NEAR(to(got.dx, kFloat32), to(want.dx, kFloat32), 2e-2, 1e-4);
      if (w_grad) EXPECT_TENSOR_NEAR(to(got.dw, kFloat32), to(want.dw, kFloat32), 2e-2, 1e-4);
    }
  }
}

TEST(LinearCrossEntropy, Bf16AtLlama3VocabularyOnTheGpuTakesTheRowOnceKernel) {
  TG_REQUIRE_CUDA();
  Generator gen(6);
  const int64_t N = 300, H = 64, V = 128256;  // chunks of 128 rows: 128, 128, 44
  Tensor x = to(mul(randn({N, H}, gen), 0.3), kBFloat16, Device::cuda());
  Tensor w = to(mul(randn({V, H}, gen), 0.3), kBFloat16, Device::cuda());
  std::vector<int64_t> tv = randint(0, V, {N}, gen).to_vector<int64_t>();
  tv[7] = tv[200] = -100;
  tv[8] = 0, tv[9] = V - 1;
  Tensor t = to(from_vector(tv, {N}), Device::cuda());
  LossRun want = run([](const auto& x, const auto& w, const auto& t) { return reference(x, w, t); }, x, w, t, true);
  KernelTrace trace;
  LossRun got = run([](const auto& x, const auto& w, const auto& t) {
    return detail::linear_cross_entropy_chunked(x, w, t, -100, Reduction::Mean, 128);
  }, x, w, t, true);
  EXPECT_TRUE(trace.contains("cross_entropy.grad_row_once"));  // an sm_90 build on an H100 / H200
  EXPECT_TENSOR_NEAR(got.loss, want.loss, 1e-3, 1e-3);
  EXPECT_TENSOR_NEAR(to(got.dx, kFloat32), to(want.dx, kFloat32), 2e-2, 1e-4);
  EXPECT_TENSOR_NEAR(to(got.dw, kFloat32), to(want.dw, kFloat32), 2e-2, 1e-4);
}

#ifdef TG_WITH_CUDA
// The chunks' kernel against the CPU's: loss and lse of every row and dlogits (in place), with an
// ignored target, one out of range (nan loss, zero row, reported by a later call), the first and
// the last class. Rows of >= 16384 classes in 16-byte packs take the row-once kernel (a cluster
// of 1, 2, 4 or 8 CTAs a row, the last slice shorter where the packs do not split evenly); the
// others the two-read kernel: too few classes, not a whole number of packs, over 8 slices.
TEST(CrossEntropyWithGradCuda, RowOnceAndTwoReadKernelsMatchTheCpu) {
  TG_REQUIRE_CUDA();
  struct Case {
    DType dtype;
    int64_t classes;
    bool row_once;
    DType index = kInt64;
  };
  const Case cases[] = {
      {kBFloat16, 128256, true},            // 4 CTAs a row
      {kFloat32, 128256, true},             // 8
      {kBFloat16, 32000, true, kInt32},     // 1
      {kFloat32, 32000, true},              // 2
      {kBFloat16, 40008, true},             // 2, the second slice a pack shorter
      {kBFloat16, 50257, false},            // rows not in whole packs (GPT-2)
      {kBFloat16, 8192, false},             // short rows
      {kFloat32, 262144, false},            // more than 8 slices of 64 KB
  };
  Generator gen(7);
  const int64_t N = 37;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.dtype == kBFloat16 ? "bf16 " : "float32 ") + std::to_string(c.classes) + " classes");
    const int64_t V = c.classes;
    Tensor logits = to(add(mul(randn({N, V}, gen), 3.0), 1.0), c.dtype);
    std::vector<int64_t> tv = randint(0, V, {N}, gen).to_vector<int64_t>();
    tv[1] = -100, tv[2] = V + 5, tv[3] = 0, tv[4] = V - 1;
    Tensor targets = to(from_vector(tv, {N}), c.index);
    // The reference in float64: a float32 sum over a 128256-class row on the CPU is itself off by
    // about 1e-5 of the lse (seen on the H200 against both kernels).
    const TensorOptions acc{.dtype = kFloat64};
    Tensor want_x = to(logits, kFloat64), want_loss = Tensor::empty({N}, acc), want_lse = Tensor::empty({N}, acc);
    cpu::cross_entropy_with_grad(want_loss, want_lse, want_x, targets, -100);
    const TensorOptions dacc{.dtype = kFloat32, .device = Device::cuda()};
    Tensor x = to(logits, Device::cuda()), loss = Tensor::empty({N}, dacc), lse = Tensor::empty({N}, dacc);
    KernelTrace trace;
    cuda::cross_entropy_with_grad(loss, lse, x, to(targets, Device::cuda()), -100);
    EXPECT_EQ(trace.contains("cross_entropy.grad_row_once"), c.row_once);
    EXPECT_EQ(trace.contains("cross_entropy.grad_two_reads"), !c.row_once);
    EXPECT_TENSOR_NEAR(to(loss, kFloat64, Device::cpu()), want_loss, 1e-5, 1e-5);  // row 2: nan on both
    EXPECT_TENSOR_NEAR(to(lse, kFloat64, Device::cpu()), want_lse, 1e-5, 1e-5);
    const double rtol = c.dtype == kBFloat16 ? 1e-2 : 1e-4;  // bf16: one rounding apart at most
    EXPECT_TENSOR_NEAR(to(x, kFloat64, Device::cpu()), want_x, rtol, 1e-7);
    const std::string bad = "target " + std::to_string(V + 5), bound = std::to_string(V) + " classes";
    EXPECT_ERROR_HAS(cross_entropy(to(slice(logits, 0, 0, 2), Device::cuda()),
                                   to(from_vector<int64_t>({0, 1}), Device::cuda())),
                     "cross_entropy", bad.c_str(), bound.c_str());  // reported by the next call
  }
}
#endif

}  // namespace
}  // namespace tg
