// The CUDA flash-attention kernels (ops/cuda/attention.cu, cuDNN's turned off) against the CPU
// fused kernel in float64 on the same bf16-rounded inputs, over awkward shapes (T not a multiple
// of the 64-row tiles, one query, grouped-query ratios 1, 2, 4, causal and not), in the layout
// the model gives them ([B, H, T, hd] views of [B, T, H, hd] projections); which gradients each
// mask computes; determinism; and where the composition still runs. GPU tests skip without a
// device. banded_causal_attention's flash variants likewise against the CPU's banded kernel.
// tests/test_attention_cudnn.cpp tests cuDNN's kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "nn/loss.h"
#include "nn/models/llama.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/shape.h"
#include "testing/testing.h"
#include "tests/attention_test_util.h"
#include "tests/test_support.h"

namespace tg {
namespace {

using namespace test;

constexpr const char* kFlash = "sdpa.flash_cuda";
constexpr const char* kFlashBackward = "sdpa.flash_cuda_backward";

TEST(AttentionCuda, FlashMatchesFloat64OnShortSequences) {
  TG_REQUIRE_CUDA();
  CudnnSdpScope flash_only(false);
  uint64_t seed = 100;
  for (int64_t T : {1, 17, 127})
    for (int64_t hd : {32, 64, 128})
      for (int64_t group : {1, 2, 4})
        for (bool causal : {true, false}) check_case({2, 4, 4 / group, T, T, hd, causal}, seed++, kFlash, kFlashBackward);
}

TEST(AttentionCuda, FlashMatchesFloat64OnLongSequences) {
  TG_REQUIRE_CUDA();
  CudnnSdpScope flash_only(false);
  uint64_t seed = 200;
  for (int64_t T : {1000, 1024})
    for (int64_t hd : {64, 128})
      for (int64_t group : {1, 4})
        for (bool causal : {true, false}) check_case({1, 4, 4 / group, T, T, hd, causal}, seed++, kFlash, kFlashBackward);
}

TEST(AttentionCuda, FlashMatchesFloat64WithMoreOrFewerKeysThanQueries) {
  TG_REQUIRE_CUDA();
  CudnnSdpScope flash_only(false);
  // causal with S != L: top-left aligned (query i sees keys j <= i), as the CPU kernel.
  uint64_t seed = 300;
  for (auto [L, S] : {std::pair<int64_t, int64_t>{70, 130}, {130, 70}, {1, 65}, {65, 1}})
    for (bool causal : {true, false}) check_case({1, 2, 2, L, S, 64, causal}, seed++, kFlash, kFlashBackward);
}

// Position ids of documents of random lengths in [1, longest], filling each of B rows of L.
Tensor random_documents(int64_t B, int64_t L, int64_t longest, Generator& gen) {
  std::vector<int64_t> pos;
  const std::vector<int64_t> lengths = randint(1, longest + 1, {B * L}, gen, {kInt64}).to_vector<int64_t>();
  for (int64_t b = 0, d = 0; b < B; ++b)
    for (int64_t i = 0; i < L;)
      for (int64_t n = lengths[d++], t = 0; t < n && i < L; ++t, ++i) pos.push_back(t);
  return from_vector(pos, {B, L});
}

TEST(AttentionCuda, BandedFlashMatchesFloat64) {
  TG_REQUIRE_CUDA();
  // Packed documents (short ones: many bands a tile; long ones: tiles skipped), sliding windows,
  // both, one band for every sequence; more and fewer keys than queries.
  uint64_t seed = 1000;
  Generator gen(999);
  for (int64_t hd : {32, 64, 128})
    for (int64_t group : {1, 4}) {
      const Case c{2, 4, 4 / group, 700, 700, hd, true};
      check_case(c, seed++, kFlash, kFlashBackward, {random_documents(2, 700, 40, gen)});
      check_case(c, seed++, kFlash, kFlashBackward, {random_documents(2, 700, 400, gen)});
      check_case(c, seed++, kFlash, kFlashBackward, {Tensor(), 129});
      check_case(c, seed++, kFlash, kFlashBackward, {random_documents(2, 700, 300, gen), 100});
      check_case(c, seed++, kFlash, kFlashBackward, {reshape(random_documents(1, 700, 200, gen), {700})});  // one band for both rows
    }
  check_case({1, 2, 2, 150, 260, 64, true}, seed++, kFlash, kFlashBackward, {random_documents(1, 150, 50, gen)});
  check_case({1, 2, 2, 260, 150, 64, true}, seed++, kFlash, kFlashBackward, {random_documents(1, 260, 90, gen)});
}

TEST(AttentionCuda, BandedMasksComputeOnlyTheirGradientsBitwise) {
  TG_REQUIRE_CUDA();
  Generator gen(1100);
  const int64_t B = 2, T = 300, H = 4, Hkv = 2, hd = 128;
  Tensor q = to(randn({B, T, H, hd}, gen), kBFloat16, kGpu), k = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu);
  Tensor v = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu), dout = to(randn({B, H, T, hd}, gen), kBFloat16, kGpu);
  const Band band{random_documents(B, T, 90, gen), 64};
  const Grads all = run(q, k, v, dout, true, {true, true, true}, band);
  const Grads again = run(q, k, v, dout, true, {true, true, true}, band);
  EXPECT_TENSOR_EQ(again.dq, all.dq);
  EXPECT_TENSOR_EQ(again.dk, all.dk);
  for (std::array<bool, 3> wants : {std::array<bool, 3>{false, true, true}, {true, false, true}, {true, true, false},
                                    {true, false, false}}) {
    const Grads part = run(q, k, v, dout, true, wants, band);
    if (wants[0]) EXPECT_TENSOR_EQ(part.dq, all.dq);
    if (wants[1]) EXPECT_TENSOR_EQ(part.dk, all.dk);
    if (wants[2]) EXPECT_TENSOR_EQ(part.dv, all.dv);
  }
}

TEST(AttentionCuda, EachMaskComputesOnlyItsGradientsAndTheOthersBitwise) {
  TG_REQUIRE_CUDA();
  CudnnSdpScope flash_only(false);
  // Both head dims (their kernels differ in tile shapes and in which operands stay in registers).
  for (const int64_t hd : {64, 128}) {
    SCOPED_TRACE("head dim " + std::to_string(hd));
    Generator gen(400 + hd);
    const int64_t B = 2, T = 150, H = 4, Hkv = 2;
    Tensor q = to(randn({B, T, H, hd}, gen), kBFloat16, kGpu), k = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu);
    Tensor v = to(randn({B, T, Hkv, hd}, gen), kBFloat16, kGpu), dout = to(randn({B, H, T, hd}, gen), kBFloat16, kGpu);
    const Grads all = run(q, k, v, dout, true);
    const Grads again = run(q, k, v, dout, true);  // deterministic: no atomics
    EXPECT_TENSOR_EQ(again.dq, all.dq);
    EXPECT_TENSOR_EQ(again.dk, all.dk);
    EXPECT_TENSOR_EQ(again.dv, all.dv);
    struct Mask {
      std::array<bool, 3> wants;
      const char* ran;
      std::vector<const char*> skipped;
    };
    const Mask masks[] = {
        {{false, true, true}, "sdpa.flash_cuda.dk_dv", {"sdpa.flash_cuda.dq"}},
        {{true, false, true}, "sdpa.flash_cuda.dv", {"sdpa.flash_cuda.dk_dv", "sdpa.flash_cuda.dk"}},
        {{true, true, false}, "sdpa.flash_cuda.dk", {"sdpa.flash_cuda.dk_dv", "sdpa.flash_cuda.dv"}},
        {{true, false, false}, "sdpa.flash_cuda.dq", {"sdpa.flash_cuda.dk_dv", "sdpa.flash_cuda.dk", "sdpa.flash_cuda.dv"}},
    };
    for (const Mask& m : masks) {
      SCOPED_TRACE(std::to_string(m.wants[0]) + std::to_string(m.wants[1]) + std::to_string(m.wants[2]));
      KernelTrace trace;
      const Grads part = run(q, k, v, dout, true, m.wants);
      EXPECT_TRUE(trace.contains(m.ran));
      for (const char* s : m.skipped) EXPECT_FALSE(trace.contains(s)) << s;
      EXPECT_TENSOR_EQ(part.out, all.out);
      if (m.wants[0]) EXPECT_TENSOR_EQ(part.dq, all.dq);
      else EXPECT_FALSE(part.dq.defined());
      if (m.wants[1]) EXPECT_TENSOR_EQ(part.dk, all.dk);
      else EXPECT_FALSE(part.dk.defined());
      if (m.wants[2]) EXPECT_TENSOR_EQ(part.dv, all.dv);
      else EXPECT_FALSE(part.dv.defined());
    }
  }
}

TEST(AttentionCuda, ReadsHeadViewsInPlaceAndKeepsTheirLayout) {
  TG_REQUIRE_CUDA();
  CudnnSdpScope flash_only(false);
  Generator gen(500);
  Tensor x = to(randn({2, 40, 3, 64}, gen), kBFloat16, kGpu).requires_grad_(true);
  Tensor h = head_view(x);
  Tensor out = scaled_dot_product_attention(h, h, h, true);
  EXPECT_EQ(out.strides(), Shape({40 * 3 * 64, 64, 3 * 64, 1}));  // [B, H, T, hd] view of [B, T, H, hd]
  EXPECT_EQ(out.grad_fn()->saved_bytes(), 3 * x.nbytes() + out.nbytes() + 2 * 3 * 40 * sizeof(float));
  std::vector<Tensor> grads = out.grad_fn()->backward({full(out.shape(), 1.0, {kBFloat16, kGpu})}, {true, true, true});
  for (const Tensor& g : grads) EXPECT_EQ(g.strides(), h.strides());
}

TEST(AttentionCuda, MisalignedRowsAreCopiedNotMisread) {
  TG_REQUIRE_CUDA();
  CudnnSdpScope flash_only(false);
  // Views starting one element into their storage: rows not 16-byte aligned.
  Generator gen(600);
  const int64_t B = 1, T = 33, H = 2, hd = 64, n = B * T * H * hd;
  Tensor buf = to(randn({1 + 3 * n}, gen), kBFloat16), dout = to(randn({B, H, T, hd}, gen), kBFloat16);
  auto part = [&](const Tensor& b, int64_t i) { return reshape(slice(b, 0, 1 + i * n, 1 + (i + 1) * n), {B, T, H, hd}); };
  Tensor gbuf = to(buf, kGpu);
  ASSERT_NE(reinterpret_cast<uintptr_t>(part(gbuf, 0).data_ptr()) % 16, 0u);
  Grads want = run(to(part(buf, 0), kFloat64), to(part(buf, 1), kFloat64), to(part(buf, 2), kFloat64),
                   to(dout, kFloat64), true);
  Grads got = run(part(gbuf, 0), part(gbuf, 1), part(gbuf, 2), to(dout, kGpu), true);
  expect_all_close(got, want);
}

TEST(AttentionCuda, CompositionWhereTheFlashKernelsDoNotApply) {
  TG_REQUIRE_CUDA();
  CudnnSdpScope flash_only(false);
  Generator gen(700);
  auto trace_of = [&](DType dt, int64_t hd, double dropout) {
    Tensor q = to(randn({1, 2, 9, hd}, gen), dt, kGpu);
    KernelTrace trace;
    scaled_dot_product_attention(q, q, q, true, std::nullopt, dropout, gen);
    return trace.contains("sdpa.composite") && !trace.contains("sdpa.flash_cuda");
  };
  EXPECT_TRUE(trace_of(kFloat32, 64, 0.0));   // float32: matmul / softmax composition
  EXPECT_TRUE(trace_of(kBFloat16, 80, 0.0));  // a head dim without a kernel
  EXPECT_TRUE(trace_of(kBFloat16, 64, 0.1));  // dropout needs the probabilities
  EXPECT_FALSE(trace_of(kBFloat16, 64, 0.0));
}

TEST(AttentionCuda, LlamaWithGroupedQueryHeadsUsesTheFlashKernels) {
  TG_REQUIRE_CUDA();
  CudnnSdpScope flash_only(false);
  nn::LlamaConfig cfg = nn::LlamaConfig::tiny();  // head_dim 32
  cfg.num_key_value_heads = 2;
  const LlamaStep step = llama_step(cfg, 100, 800);
  EXPECT_EQ(step.count("sdpa.flash_cuda"), static_cast<size_t>(cfg.num_hidden_layers));
  EXPECT_EQ(step.count("sdpa.flash_cuda.dk_dv"), static_cast<size_t>(cfg.num_hidden_layers));
  EXPECT_FALSE(step.contains("sdpa.composite"));
  // and the other fused CUDA kernels of the block
  EXPECT_TRUE(step.contains("apply_rotary_pos_emb.fused_cuda") &&
              step.contains("apply_rotary_pos_emb.fused_cuda_backward"));
  EXPECT_TRUE(step.contains("silu_mul.fused_cuda") && step.contains("silu_mul.fused_cuda_backward"));
  EXPECT_FALSE(step.contains("apply_rotary.composite") || step.contains("apply_rotary_pos_emb.unfused") ||
               step.contains("silu_mul.composite"));
  EXPECT_TRUE(step.contains("linear_cross_entropy.dx_dweight"));
  EXPECT_NEAR(step.got, step.want, 2e-2 * step.want);
}

// ---- decoding: one query against a cache (ops/cuda/decode_attention.cu), no autograd

// One decode step of B sequences: q [B, H, 1, hd] as the view of [B, 1, H, hd]; keys and values
// the first S columns of a [B, Hkv, max, hd] cache; mask bool [B, 1, 1, S] or undefined.
void check_decode(int64_t B, int64_t H, int64_t Hkv, int64_t S, int64_t hd, DType dt, bool masked, uint64_t seed) {
  SCOPED_TRACE("B" + std::to_string(B) + " H" + std::to_string(H) + " Hkv" + std::to_string(Hkv) + " S" +
               std::to_string(S) + " hd" + std::to_string(hd) + " " + dtype_name(dt) + (masked ? " masked" : ""));
  Generator gen(seed);
  const int64_t max = S + 7;
  Tensor q = to(randn({B, 1, H, hd}, gen), dt), keys = to(randn({B, Hkv, max, hd}, gen), dt);
  Tensor values = to(randn({B, Hkv, max, hd}, gen), dt);
  Tensor mask;
  if (masked) {  // about half of the keys dropped; sequence 0 keeps none (its output is 0)
    mask = randint(0, 2, {B, 1, 1, S}, gen, {kBool});
    NoGradGuard g;
    copy_(slice(mask, 0, 0, 1), zeros({1, 1, 1, S}, {kBool}));
  }
  auto attend = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, const Tensor& m) {
    NoGradGuard g;
    return scaled_dot_product_attention(transpose(qq, 1, 2), slice(kk, 2, 0, S), slice(vv, 2, 0, S), false,
                                        std::nullopt, 0.0, default_generator(), H != Hkv, m);
  };
  Tensor want = attend(to(q, kFloat64), to(keys, kFloat64), to(values, kFloat64), mask);
  poison_allocator({B, H, Hkv, 1, S, hd, false});
  KernelTrace trace;
  Tensor got = attend(to(q, kGpu), to(keys, kGpu), to(values, kGpu), masked ? to(mask, kGpu) : Tensor());
  EXPECT_TRUE(trace.contains("sdpa.decode_cuda")) << trace.str();
  EXPECT_FALSE(trace.contains("sdpa.composite") || trace.contains("sdpa.flash_cuda")) << trace.str();
  ASSERT_EQ(got.shape(), Shape({B, H, 1, hd}));
  if (dt == kBFloat16) {
    expect_close(got, want, "out");
  } else {
    auto [rel, mx] = errors(got, want);
    EXPECT_LT(mx, 1e-5) << "float32 out: max error / max " << mx << " (relative " << rel << ")";
  }
  if (masked) EXPECT_EQ(max_abs(slice(got, 0, 0, 1)), 0.0) << "a sequence with no key left";
}

TEST(AttentionCuda, DecodeMatchesFloat64AcrossSplitsHeadDimsAndMasks) {
  TG_REQUIRE_CUDA();
  uint64_t seed = 900;
  for (DType dt : {kBFloat16, kFloat32})
    for (int64_t hd : {8, 64, 128})
      for (int64_t S : {1, 17, 300, 5000}) check_decode(1, 4, 4, S, hd, dt, false, seed++);
  check_decode(3, 8, 2, 257, 64, kBFloat16, true, seed++);  // grouped heads, a mask, several splits
  check_decode(2, 4, 1, 40, 256, kFloat32, true, seed++);
  check_decode(32, 12, 12, 384, 64, kBFloat16, false, seed++);  // a batch that fills the GPU: one split
}

TEST(AttentionCuda, DecodeOnlyWithoutGradientsAndForOneQuery) {
  TG_REQUIRE_CUDA();
  Generator gen(950);
  Tensor k = to(randn({1, 2, 30, 64}, gen), kBFloat16, kGpu);
  auto trace_of = [&](int64_t L, bool grad, bool causal) {
    Tensor q = to(randn({1, 2, L, 64}, gen), kBFloat16, kGpu).requires_grad_(grad);
    KernelTrace trace;
    scaled_dot_product_attention(q, k, k, causal, std::nullopt, 0.0, gen);
    return trace.contains("sdpa.decode_cuda");
  };
  EXPECT_TRUE(trace_of(1, false, false));
  EXPECT_FALSE(trace_of(1, true, false));   // training: the flash kernels keep lse for backward
  EXPECT_FALSE(trace_of(2, false, false));  // a chunk of queries
  EXPECT_FALSE(trace_of(1, false, true));   // causal with one query sees key 0 only: the flash kernel
}

TEST(AttentionCuda, RotaryPosEmbIsTwoApplyRotaryCallsBitwise) {
  // apply_rotary_pos_emb's one launch against apply_rotary's two (tests/attention_test_util.h):
  // head views of one projection, 16-byte packs (hd 128, 64) and narrower (hd 6), GQA,
  // per-sequence tables, T not a multiple of the 64-row blocks, one of q and k frozen.
  TG_REQUIRE_CUDA();
  for (DType dt : {kBFloat16, kFloat32}) {
    expect_pos_emb_is_two_apply_rotary(kGpu, dt, 2, 130, 4, 4, 128, false, 1);
    expect_pos_emb_is_two_apply_rotary(kGpu, dt, 1, 100, 8, 2, 64, false, 2);
    expect_pos_emb_is_two_apply_rotary(kGpu, dt, 3, 70, 4, 1, 64, true, 3);
    expect_pos_emb_is_two_apply_rotary(kGpu, dt, 2, 9, 3, 1, 6, false, 4);
  }
}

}  // namespace
}  // namespace tg
