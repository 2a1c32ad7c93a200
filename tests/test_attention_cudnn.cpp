// cuDNN's fused flash attention (ops/cuda/attention_cudnn.cu, the graphs of
// ops/cuda/cudnn_sdpa.cuh) against the CPU fused kernel in float64 on the same bf16-rounded
// inputs: head dims 32, 64, 80, 96, 128, 256 (80, 96 and 256 have no flash kernel), causal and not,
// grouped kv heads, odd lengths, more or fewer keys than queries, every gradient; the kernels each
// call names (and where cuDNN hands a call back); every mask gets the bits of the full backward;
// a CUDA graph replay is bitwise the eager calls and a capture builds no plan. Skips without a
// GPU or without cuDNN in the build.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/cuda_graph.h"
#include "core/cuda_settings.h"
#include "core/factory.h"
#include "core/memory.h"
#include "core/trace.h"
#include "nn/models/llama.h"
#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "ops/cast.h"
#include "ops/shape.h"
#include "testing/testing.h"
#include "tests/attention_test_util.h"
#include "tests/test_support.h"

namespace tg {
namespace {

using namespace test;

size_t cudnn_version() {
#ifdef TG_WITH_CUDA
  return cuda::sdpa_cudnn_version();
#else
  return 0;
#endif
}

#define TG_REQUIRE_CUDNN()                                                         \
  do {                                                                             \
    TG_REQUIRE_CUDA();                                                             \
    if (cudnn_version() == 0) GTEST_SKIP() << "tapegrad built without cuDNN";       \
  } while (0)

struct Kernels {
  const char* forward;
  const char* backward;
};

// What serves a case (ops/attention.h): cuDNN both ways, unless this runtime's backward refuses
// the key count (cuDNN up to 9.15 wants multiples of 128); then cuDNN's forward with the flash
// backward where the flash kernels have the head dim, else the composition.
Kernels expected(const Case& c) {
  if (cudnn_version() > 91500 || c.S % 128 == 0) return {"sdpa.cudnn", "sdpa.cudnn_backward"};
  if (c.hd == 32 || c.hd == 64 || c.hd == 128) return {"sdpa.cudnn", "sdpa.flash_cuda_backward"};
  return {"sdpa.composite", "sdpa.composite"};
}

void check(const Case& c, uint64_t seed) {
  const Kernels k = expected(c);
  check_case(c, seed, k.forward, k.backward);
}

TEST(AttentionCudnn, MatchesFloat64AtEveryHeadDim) {
  TG_REQUIRE_CUDNN();
  uint64_t seed = 1000;
  for (int64_t T : {128, 17})
    for (int64_t hd : {32, 64, 80, 96, 128, 256})
      for (int64_t group : {1, 4})
        for (bool causal : {true, false}) check({2, 4, 4 / group, T, T, hd, causal}, seed++);
}

TEST(AttentionCudnn, MatchesFloat64OnLongSequences) {
  TG_REQUIRE_CUDNN();
  uint64_t seed = 1100;
  for (int64_t T : {1024, 1000})
    for (int64_t hd : {64, 128})
      for (bool causal : {true, false}) check({1, 4, 2, T, T, hd, causal}, seed++);
}

// A row long enough that one kv head's dP (cuDNN's deterministic backward keeps it whole: 4.5 GiB
// here, past the budget of 1/64 of an 80 or 141 GB GPU): cuDNN's forward, the flash kernels'
// backward, which holds O(T); the gradients those of the flash kernels both ways.
TEST(AttentionCudnn, ALongRowsBackwardPastTheWorkspaceBudgetRunsOnTheFlashKernels) {
  TG_REQUIRE_CUDNN();
  Generator gen(1150);
  const int64_t T = 24576;
  const Tensor q = to(randn({1, T, 4, 64}, gen), kBFloat16, kGpu), k = to(randn({1, T, 1, 64}, gen), kBFloat16, kGpu);
  const Tensor v = to(randn({1, T, 1, 64}, gen), kBFloat16, kGpu), dout = to(randn({1, 4, T, 64}, gen), kBFloat16, kGpu);
  KernelTrace trace;
  reset_peak_memory_stats(kGpu);
  const size_t before = memory_stats(kGpu).bytes_in_use;
  const Grads got = run(q, k, v, dout, true);
  EXPECT_TRUE(trace.contains("sdpa.cudnn") && trace.contains("sdpa.flash_cuda_backward")) << trace.str();
  EXPECT_LT(memory_stats(kGpu).peak_bytes - before, size_t(512) << 20);  // no [4, T, T] dP
  enable_cudnn_sdp(false);
  const Grads flash = run(q, k, v, dout, true);
  enable_cudnn_sdp(true);
  for (auto [g, f] : {std::pair{got.dq, flash.dq}, {got.dk, flash.dk}, {got.dv, flash.dv}})
    EXPECT_LT(errors(g, f).first, 2e-2);
}

TEST(AttentionCudnn, MatchesFloat64WithMoreOrFewerKeysThanQueries) {
  TG_REQUIRE_CUDNN();
  // causal with S != L: top-left aligned (query i sees keys j <= i), as the CPU kernel.
  uint64_t seed = 1200;
  for (auto [L, S] : {std::pair<int64_t, int64_t>{128, 256}, {256, 128}, {70, 130}, {130, 70}})
    for (bool causal : {true, false}) check({1, 2, 2, L, S, 64, causal}, seed++);
}

TEST(AttentionCudnn, ValuesOfAnotherHeadDim) {
  TG_REQUIRE_CUDNN();
  Generator gen(1300);
  const int64_t B = 2, T = 128, H = 4;
  Tensor q = to(randn({B, T, H, 128}, gen), kBFloat16), k = to(randn({B, T, H, 128}, gen), kBFloat16);
  Tensor v = to(randn({B, T, H, 64}, gen), kBFloat16), dout = to(randn({B, H, T, 64}, gen), kBFloat16);
  Grads want = run(to(q, kFloat64), to(k, kFloat64), to(v, kFloat64), to(dout, kFloat64), true);
  KernelTrace trace;
  Grads got = run(to(q, kGpu), to(k, kGpu), to(v, kGpu), to(dout, kGpu), true);
  EXPECT_TRUE(trace.contains("sdpa.cudnn") && trace.contains("sdpa.cudnn_backward")) << trace.str();
  expect_all_close(got, want);
}

TEST(AttentionCudnn, EveryMaskGetsTheBitsOfTheFullBackward) {
  TG_REQUIRE_CUDNN();
  Generator gen(1400);
  const int64_t B = 2, T = 256, H = 4, Hkv = 2, hd = 128;
  Tensor q = to(randn({B, T, H, hd}, gen), kBFloat16, kGpu), k = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu);
  Tensor v = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu), dout = to(randn({B, H, T, hd}, gen), kBFloat16, kGpu);
  const Grads all = run(q, k, v, dout, true);
  const Grads again = run(q, k, v, dout, true);  // the deterministic backward: no atomics
  EXPECT_TENSOR_EQ(again.dq, all.dq);
  EXPECT_TENSOR_EQ(again.dk, all.dk);
  EXPECT_TENSOR_EQ(again.dv, all.dv);
  for (std::array<bool, 3> wants : {std::array<bool, 3>{false, true, true}, {true, false, true}, {true, true, false},
                                    {true, false, false}, {false, false, true}}) {
    SCOPED_TRACE(std::to_string(wants[0]) + std::to_string(wants[1]) + std::to_string(wants[2]));
    KernelTrace trace;
    const Grads part = run(q, k, v, dout, true, wants);
    EXPECT_TRUE(trace.contains("sdpa.cudnn_backward")) << trace.str();
    EXPECT_FALSE(trace.contains("sdpa.flash_cuda_backward")) << trace.str();
    EXPECT_TENSOR_EQ(part.out, all.out);
    if (wants[0]) EXPECT_TENSOR_EQ(part.dq, all.dq);
    else EXPECT_FALSE(part.dq.defined());
    if (wants[1]) EXPECT_TENSOR_EQ(part.dk, all.dk);
    else EXPECT_FALSE(part.dk.defined());
    if (wants[2]) EXPECT_TENSOR_EQ(part.dv, all.dv);
    else EXPECT_FALSE(part.dv.defined());
  }
}

TEST(AttentionCudnn, DoutInTheOutputsLayoutOrAnotherGivesTheSameBits) {
  TG_REQUIRE_CUDNN();
  Generator gen(1500);
  const int64_t B = 2, T = 128, H = 4, hd = 64;
  Tensor q = to(randn({B, T, H, hd}, gen), kBFloat16, kGpu), dout = to(randn({B, T, H, hd}, gen), kBFloat16, kGpu);
  const Grads in_place = run(q, q, q, head_view(dout), true);  // out's own layout: read as it is
  const Grads copied = run(q, q, q, contiguous(head_view(dout)), true);
  EXPECT_TENSOR_EQ(copied.dq, in_place.dq);
  EXPECT_TENSOR_EQ(copied.dk, in_place.dk);
  EXPECT_TENSOR_EQ(copied.dv, in_place.dv);
}

// Forward and backward of one call on fixed leaves: out, dq, dk, dv.
std::vector<Tensor> attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout) {
  Tensor out = scaled_dot_product_attention(head_view(q), head_view(k), head_view(v), true, std::nullopt, 0.0,
                                            default_generator(), q.shape()[2] != k.shape()[2]);
  NoGradGuard g;
  std::vector<Tensor> grads = out.grad_fn()->backward({dout}, {true, true, true});
  return {out, grads[0], grads[1], grads[2]};
}

TEST(AttentionCudnn, CudaGraphReplayIsBitwiseTheEagerCall) {
  TG_REQUIRE_CUDNN();
  Generator gen(1600);
  const int64_t B = 2, T = 256, H = 8, Hkv = 2, hd = 128;
  Tensor q = to(randn({B, T, H, hd}, gen), kBFloat16, kGpu).requires_grad_(true);
  Tensor k = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu).requires_grad_(true);
  Tensor v = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu).requires_grad_(true);
  Tensor dout = to(randn({B, H, T, hd}, gen), kBFloat16, kGpu);
  const std::vector<Tensor> eager = attend(q, k, v, dout);  // builds the plans
  cuda::CUDAGraph graph;
  std::vector<Tensor> replayed;
  KernelTrace trace;
  graph.capture([&] { replayed = attend(q, k, v, dout); });
  EXPECT_TRUE(trace.contains("sdpa.cudnn") && trace.contains("sdpa.cudnn_backward")) << trace.str();
  for (int i = 0; i < 2; ++i) {
    graph.replay();
    for (size_t t = 0; t < eager.size(); ++t) EXPECT_TENSOR_EQ(replayed[t], eager[t]);
  }
}

TEST(AttentionCudnn, ACaptureBuildsNoPlanAndTakesTheFlashKernels) {
  TG_REQUIRE_CUDNN();
  Generator gen(1700);
  const int64_t B = 3, T = 384, H = 2, hd = 64;  // a shape no other test of this process uses
  Tensor q = to(randn({B, T, H, hd}, gen), kBFloat16, kGpu).requires_grad_(true);
  Tensor dout = to(randn({B, H, T, hd}, gen), kBFloat16, kGpu);
  std::vector<Tensor> flash;
  {
    CudnnSdpScope off(false);
    flash = attend(q, q, q, dout);
  }
  cuda::CUDAGraph graph;
  std::vector<Tensor> replayed;
  {
    KernelTrace trace;
    graph.capture([&] { replayed = attend(q, q, q, dout); });
    EXPECT_TRUE(trace.contains("sdpa.flash_cuda") && trace.contains("sdpa.flash_cuda_backward")) << trace.str();
    EXPECT_FALSE(trace.contains("sdpa.cudnn")) << trace.str();
  }
  graph.replay();
  for (size_t t = 0; t < flash.size(); ++t) EXPECT_TENSOR_EQ(replayed[t], flash[t]);
  KernelTrace trace;
  attend(q, q, q, dout);  // eager: now the plans are built
  EXPECT_TRUE(trace.contains("sdpa.cudnn") && trace.contains("sdpa.cudnn_backward")) << trace.str();
}

// Gradients of one causal call on the flash kernels and on cuDNN's.
struct Both {
  std::vector<Tensor> flash, cudnn;
};

Both flash_and_cudnn(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, uint64_t seed) {
  Generator gen(seed);
  Tensor q = to(randn({B, T, H, hd}, gen), kBFloat16, kGpu).requires_grad_(true);
  Tensor k = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu).requires_grad_(true);
  Tensor v = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu).requires_grad_(true);
  Tensor dout = to(randn({B, H, T, hd}, gen), kBFloat16, kGpu);
  Both both;
  {
    CudnnSdpScope off(false);
    both.flash = attend(q, k, v, dout);
  }
  synchronize(kGpu);
  reset_peak_memory_stats(kGpu);
  const size_t before = memory_stats(kGpu).bytes_in_use;
  KernelTrace trace;
  both.cudnn = attend(q, k, v, dout);
  synchronize(kGpu);
  EXPECT_TRUE(trace.contains("sdpa.cudnn") && trace.contains("sdpa.cudnn_backward")) << trace.str();
  // dP, [B, H, T, T] bf16, is more than the chunks keep (1/64 of the device's memory)
  const size_t dp = size_t(B * H) * T * T * 2, peak = memory_stats(kGpu).peak_bytes - before;
  EXPECT_LT(peak, dp) << "peak " << peak << " bytes";
  return both;
}

TEST(AttentionCudnn, DeterministicBackwardInChunksOfBatchesOrHeads) {
  TG_REQUIRE_CUDNN();
  // dP 4 GiB each, more than any device up to 256 GB gives it: batch chunks, kv-head chunks
  for (auto [B, H, Hkv, T] : {std::array<int64_t, 4>{8, 16, 16, 4096}, {1, 32, 8, 8192}}) {
    SCOPED_TRACE("B" + std::to_string(B) + " H" + std::to_string(H) + " Hkv" + std::to_string(Hkv) + " T" +
                 std::to_string(T));
    const Both both = flash_and_cudnn(B, T, H, Hkv, 64, 2000 + B);
    const char* what[] = {"out", "dq", "dk", "dv"};
    for (size_t t = 0; t < 4; ++t) {
      auto [rel, mx] = errors(both.cudnn[t], both.flash[t]);
      EXPECT_LT(rel, kRelTol) << what[t];
      EXPECT_LT(mx, kMaxTol) << what[t];
    }
  }
}

TEST(AttentionCudnn, CallsWithoutGradientsBuildPlansOnlyWhereNoFlashKernelServes) {
  TG_REQUIRE_CUDNN();
  Generator gen(2100);
  auto trace_of = [&](int64_t hd, bool grad) {
    Tensor q = to(randn({1, 320, 2, hd}, gen), kBFloat16, kGpu).requires_grad_(grad);  // shapes no other test uses
    KernelTrace trace;
    scaled_dot_product_attention(head_view(q), head_view(q), head_view(q), true);
    return trace.str();
  };
  EXPECT_NE(trace_of(64, false).find("sdpa.flash_cuda"), std::string::npos);  // a new prompt length: no plan
  EXPECT_NE(trace_of(64, true).find("sdpa.cudnn"), std::string::npos);       // a training call builds it
  EXPECT_NE(trace_of(64, false).find("sdpa.cudnn"), std::string::npos);      // then inference uses it
  EXPECT_NE(trace_of(96, false).find("sdpa.cudnn"), std::string::npos);      // no flash kernel at 96
}

TEST(AttentionCudnn, ACheckpointsFirstPassPicksTheKernelOfItsRecomputation) {
  TG_REQUIRE_CUDNN();
  // tg::checkpoint runs a function without recording, then again at backward with recording: both
  // passes must pick one kernel (the same bits), though only the second takes gradients. Head dim
  // 8: cuDNN may take its forward and not its backward (then neither pass takes cuDNN).
  Generator gen(2200);
  for (int64_t hd : {64, 8}) {
    Tensor q = to(randn({1, 448, 2, hd}, gen), kBFloat16, kGpu).requires_grad_(true);  // a shape no other test uses
    auto kernel_of = [&](bool first_pass) {
      std::vector<Tensor> used;
      std::optional<ObservedNoGradGuard> no_recording;
      if (first_pass) no_recording.emplace(used);
      KernelTrace trace;
      scaled_dot_product_attention(head_view(q), head_view(q), head_view(q), true);
      for (const std::string& e : trace.events())
        if (e.rfind("sdpa.", 0) == 0) return e;
      return std::string("none");
    };
    const std::string first = kernel_of(true);  // at a new shape: no plan built before
    EXPECT_EQ(first, kernel_of(false)) << "head dim " << hd;
  }
}

TEST(AttentionCudnn, TurnedOffTheFlashKernelsServe) {
  TG_REQUIRE_CUDNN();
  Generator gen(1800);
  Tensor q = to(randn({1, 128, 2, 64}, gen), kBFloat16, kGpu).requires_grad_(true);
  Tensor dout = to(randn({1, 2, 128, 64}, gen), kBFloat16, kGpu);
  CudnnSdpScope off(false);
  KernelTrace trace;
  attend(q, q, q, dout);
  EXPECT_TRUE(trace.contains("sdpa.flash_cuda") && trace.contains("sdpa.flash_cuda_backward")) << trace.str();
  EXPECT_FALSE(trace.contains("sdpa.cudnn") || trace.contains("sdpa.cudnn_backward")) << trace.str();
}

TEST(AttentionCudnn, LlamaWithGroupedQueryHeadsMatchesTheCpu) {
  TG_REQUIRE_CUDNN();
  nn::LlamaConfig cfg = nn::LlamaConfig::tiny();
  cfg.num_attention_heads = 2;  // head_dim 64
  cfg.num_key_value_heads = 1;
  const LlamaStep step = llama_step(cfg, 128, 1900);
  EXPECT_EQ(step.count("sdpa.cudnn"), static_cast<size_t>(cfg.num_hidden_layers));
  EXPECT_EQ(step.count("sdpa.cudnn_backward"), static_cast<size_t>(cfg.num_hidden_layers));
  EXPECT_NEAR(step.got, step.want, 2e-2 * step.want);
}

}  // namespace
}  // namespace tg
