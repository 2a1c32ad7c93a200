// scaled_dot_product_attention and apply_rotary: the fused CPU kernels against the compositions
// they replace, which kernel runs where, the output layouts, and what backward computes and keeps.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/trace.h"
#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/masked_fill.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/apply_rotary.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "testing/testing.h"
#include "tests/attention_test_util.h"
#include "tests/test_support.h"

namespace tg {
namespace {

// What the op computed before the fused kernel: matmul / masked_fill / softmax / matmul.
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const int64_t L = q.shape()[q.dim() - 2], S = k.shape()[k.dim() - 2];
  Tensor s = mul(matmul(q, transpose(k, -2, -1)), scale);
  if (causal) s = masked_fill(s, causal_mask(L, S), -std::numeric_limits<double>::infinity());
  return matmul(softmax(s, -1), v);
}

struct AttnRun {
  Tensor out, dq, dk, dv;
};

// Forward and backward with a fixed output gradient; `wants` picks which of q, k, v need grad.
template <class F>
AttnRun run(F&& attention, const Shape& qs, const Shape& ks, const Shape& vs, std::array<bool, 3> wants) {
  Generator gen(7);
  Tensor q = randn(qs, gen), k = randn(ks, gen), v = randn(vs, gen);
  q.requires_grad_(wants[0]), k.requires_grad_(wants[1]), v.requires_grad_(wants[2]);
  AttnRun r;
  r.out = attention(q, k, v);
  Tensor g = randn(r.out.shape(), gen);
  r.out.backward(g);
  r.dq = q.grad(), r.dk = k.grad(), r.dv = v.grad();
  return r;
}

struct Geometry {
  Shape q, k, v;
  bool causal;
};

TEST(Attention, FusedMatchesCompositeInFloat32) {
  const std::vector<Geometry> cases = {
      {{2, 4, 128, 32}, {2, 4, 128, 32}, {2, 4, 128, 32}, true},  // the tiny model's shape
      {{2, 4, 128, 32}, {2, 4, 128, 32}, {2, 4, 128, 32}, false},
      {{3, 2, 37, 7}, {3, 2, 37, 7}, {3, 2, 37, 7}, true},
      {{3, 37, 7}, {3, 50, 7}, {3, 50, 9}, true},
      {{3, 37, 7}, {3, 20, 7}, {3, 20, 9}, false},
  };
  for (const auto& c : cases) {
    for (std::array<bool, 3> wants : {std::array<bool, 3>{true, true, true}, {false, true, true}, {true, false, true},
                                      {true, true, false}, {false, false, true}}) {
      SCOPED_TRACE(shape_str(c.q) + " causal " + std::to_string(c.causal) + " wants " + std::to_string(wants[0]) +
                   std::to_string(wants[1]) + std::to_string(wants[2]));
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.q.back()));
      KernelTrace trace;
      AttnRun fused = run([&](auto& q, auto& k, auto& v) { return scaled_dot_product_attention(q, k, v, c.causal); },
                      c.q, c.k, c.v, wants);
      EXPECT_TRUE(trace.contains("sdpa.fused_cpu"));
      EXPECT_FALSE(trace.contains("sdpa.composite"));
      AttnRun want = run([&](auto& q, auto& k, auto& v) { return composite(q, k, v, c.causal, scale); }, c.q, c.k, c.v,
                     wants);
      EXPECT_TENSOR_NEAR(fused.out, want.out, 1e-5, 1e-5);
      ASSERT_EQ(fused.dq.defined(), wants[0]);
      ASSERT_EQ(fused.dk.defined(), wants[1]);
      ASSERT_EQ(fused.dv.defined(), wants[2]);
      if (wants[0]) EXPECT_TENSOR_NEAR(fused.dq, want.dq, 1e-5, 1e-5);
      if (wants[1]) EXPECT_TENSOR_NEAR(fused.dk, want.dk, 1e-5, 1e-5);
      if (wants[2]) EXPECT_TENSOR_NEAR(fused.dv, want.dv, 1e-5, 1e-5);
    }
  }
}

TEST(Attention, GroupedQueryHeadsMatchRepeatedKvHeads) {
  // enable_gqa: query head h reads kv head h / 3, as if each kv head were repeated 3 times.
  Generator gen(11);
  const int64_t B = 2, H = 6, Hkv = 2, T = 45, E = 8;
  auto repeated = [&](const Tensor& x) {
    return reshape(expand(unsqueeze(x, 2), {B, Hkv, H / Hkv, T, E}), {B, H, T, E});
  };
  AttnRun fused = run([&](auto& q, auto& k, auto& v) {
    return scaled_dot_product_attention(q, k, v, true, std::nullopt, 0.0, default_generator(), true);
  }, {B, H, T, E}, {B, Hkv, T, E}, {B, Hkv, T, E}, {true, true, true});
  AttnRun want = run([&](auto& q, auto& k, auto& v) {
    return composite(q, repeated(k), repeated(v), true, 1.0 / std::sqrt(double(E)));
  }, {B, H, T, E}, {B, Hkv, T, E}, {B, Hkv, T, E}, {true, true, true});
  EXPECT_TENSOR_NEAR(fused.out, want.out, 1e-5, 1e-5);
  EXPECT_TENSOR_NEAR(fused.dq, want.dq, 1e-5, 1e-5);
  EXPECT_TENSOR_NEAR(fused.dk, want.dk, 1e-5, 1e-5);
  EXPECT_TENSOR_NEAR(fused.dv, want.dv, 1e-5, 1e-5);
  // The composition (bfloat16 on the CPU) repeats the kv heads itself.
  Tensor q = randn({B, H, T, E}, gen), k = randn({B, Hkv, T, E}, gen), v = randn({B, Hkv, T, E}, gen);
  KernelTrace trace;
  Tensor bf = scaled_dot_product_attention(to(q, kBFloat16), to(k, kBFloat16), to(v, kBFloat16), true,
                                           std::nullopt, 0.0, default_generator(), true);
  EXPECT_TRUE(trace.contains("sdpa.composite"));
  EXPECT_TENSOR_NEAR(to(bf, kFloat32), composite(q, repeated(k), repeated(v), true, 1.0 / std::sqrt(double(E))), 3e-2,
                     3e-2);
}

TEST(Attention, GroupedQueryHeadsAreCheckedAndAskedFor) {
  Generator gen(12);
  Tensor q = randn({1, 6, 5, 4}, gen), k = randn({1, 4, 5, 4}, gen), k2 = randn({1, 2, 5, 4}, gen);
  EXPECT_ERROR_HAS(scaled_dot_product_attention(q, k2, k2, true), "leading dims differ", "enable_gqa = true");
  EXPECT_ERROR_HAS(scaled_dot_product_attention(q, k, k, true, std::nullopt, 0.0, default_generator(), true),
                   "q's 6 heads are not a multiple of k's 4");
  EXPECT_ERROR_HAS(scaled_dot_product_attention(q, k2, k, true, std::nullopt, 0.0, default_generator(), true),
                   "k and v differ in dim 1");
  Tensor q2 = randn({5, 4}, gen);
  EXPECT_ERROR_HAS(scaled_dot_product_attention(q2, q2, q2, true, std::nullopt, 0.0, default_generator(), true),
                   "enable_gqa wants q, k, v of 3 or more dims");
}

TEST(Attention, CompositionWhereTheFusedKernelDoesNotApply) {
  Generator gen(1);
  Tensor q = randn({1, 2, 5, 4}, gen), k = randn({1, 2, 5, 4}, gen), v = randn({1, 2, 5, 4}, gen);
  {
    KernelTrace trace;  // dropout keeps the composition (the mask needs the probabilities)
    scaled_dot_product_attention(q, k, v, true, std::nullopt, 0.5, gen);
    EXPECT_TRUE(trace.contains("sdpa.composite"));
    EXPECT_FALSE(trace.contains("sdpa.fused_cpu"));
  }
  {
    KernelTrace trace;  // bfloat16 keeps the composition
    Tensor out = scaled_dot_product_attention(to(q, kBFloat16), to(k, kBFloat16), to(v, kBFloat16), true);
    EXPECT_TRUE(trace.contains("sdpa.composite"));
    EXPECT_TENSOR_NEAR(to(out, kFloat32), scaled_dot_product_attention(q, k, v, true), 3e-2, 3e-2);
  }
}

TEST(Attention, FourDimOutputIsAHeadMajorViewSoMergingHeadsIsFree) {
  Generator gen(2);
  const int64_t B = 2, H = 3, L = 6, E = 4;
  Tensor q = randn({B, H, L, E}, gen), k = randn({B, H, L, E}, gen), v = randn({B, H, L, E}, gen);
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  EXPECT_EQ(out.shape(), Shape({B, H, L, E}));
  EXPECT_EQ(out.strides(), Shape({L * H * E, E, H * E, 1}));
  Tensor merged = reshape(transpose(out, 1, 2), {B, L, H * E});
  EXPECT_TRUE(merged.shares_storage_with(out));
  EXPECT_TENSOR_NEAR(out, composite(q, k, v, true, 0.5), 1e-5, 1e-5);
}

TEST(Attention, GradientsKeepTheLayoutOfHeadViews) {
  // q, k, v as the [B, H, T, hd] transposes of [B, T, H, hd] projections: their gradients come
  // back in the projections' layout, so transposing them back needs no copy.
  Generator gen(3);
  Tensor x = randn({2, 5, 3, 4}, gen, {kFloat32, Device::cpu(), true});
  Tensor h = transpose(x, 1, 2);
  Tensor out = scaled_dot_product_attention(h, h, h, true);
  std::vector<Tensor> grads = out.grad_fn()->backward({full(out.shape(), 1.0)}, {true, true, true});
  ASSERT_EQ(grads.size(), 3u);
  for (const Tensor& g : grads) {
    EXPECT_EQ(g.shape(), h.shape());
    EXPECT_EQ(g.strides(), h.strides());
  }
}

TEST(Attention, NoKeysGiveZeros) {
  Tensor q = full({1, 3, 4}, 1.0), k = full({1, 0, 4}, 1.0), v = full({1, 0, 2}, 1.0);
  Tensor out = scaled_dot_product_attention(q, k, v, false);
  EXPECT_EQ(out.shape(), Shape({1, 3, 2}));
  for (float f : out.to_vector<float>()) EXPECT_EQ(f, 0.0f);
}

// A bool mask [B, 1, 1, S] that drops the first pad[b] keys of batch b (left padding).
Tensor key_padding_mask(const std::vector<int64_t>& pad, int64_t S) {
  std::vector<bool> keep;
  for (int64_t p : pad)
    for (int64_t j = 0; j < S; ++j) keep.push_back(j >= p);
  return from_vector(keep, {static_cast<int64_t>(pad.size()), 1, 1, S});
}

TEST(Attention, MaskedKeysAreAsIfAbsent) {
  // Batch b with its first pad[b] keys masked out == batch b alone on the keys that are left,
  // forward and every gradient; fused on the CPU (float32, float64), composed in bfloat16.
  Generator gen(8);
  const int64_t H = 2, L = 5, S = 7, E = 4;
  const std::vector<int64_t> pad = {0, 3};
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor q = randn({2, H, L, E}, gen, {dt, Device::cpu(), true}), k = randn({2, H, S, E}, gen, {dt, Device::cpu(), true});
    Tensor v = randn({2, H, S, E}, gen, {dt, Device::cpu(), true}), g = randn({2, H, L, E}, gen, {dt});
    KernelTrace trace;
    Tensor out = scaled_dot_product_attention(q, k, v, false, std::nullopt, 0.0, default_generator(), false,
                                              key_padding_mask(pad, S));
    EXPECT_TRUE(trace.contains("sdpa.fused_cpu"));
    out.backward(g);
    for (int64_t b = 0; b < 2; ++b) {
      Tensor qb = clone(slice(q.detach(), 0, b, b + 1)).requires_grad_(true);
      Tensor kb = clone(slice(slice(k.detach(), 0, b, b + 1), 2, pad[b], S)).requires_grad_(true);
      Tensor vb = clone(slice(slice(v.detach(), 0, b, b + 1), 2, pad[b], S)).requires_grad_(true);
      Tensor want = scaled_dot_product_attention(qb, kb, vb, false);
      want.backward(slice(g, 0, b, b + 1));
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      EXPECT_TENSOR_NEAR(slice(out, 0, b, b + 1), want, tol, tol);
      EXPECT_TENSOR_NEAR(slice(q.grad(), 0, b, b + 1), qb.grad(), tol, tol);
      EXPECT_TENSOR_NEAR(slice(slice(k.grad(), 0, b, b + 1), 2, pad[b], S), kb.grad(), tol, tol);
      EXPECT_TENSOR_NEAR(slice(slice(v.grad(), 0, b, b + 1), 2, pad[b], S), vb.grad(), tol, tol);
      for (float f : to(slice(slice(k.grad(), 0, b, b + 1), 2, 0, pad[b]), kFloat32).to_vector<float>()) EXPECT_EQ(f, 0.0f);
    }
    if (dt == kFloat32) {
      KernelTrace bf;
      Tensor composed = scaled_dot_product_attention(to(q.detach(), kBFloat16), to(k.detach(), kBFloat16),
                                                     to(v.detach(), kBFloat16), false, std::nullopt, 0.0,
                                                     default_generator(), false, key_padding_mask(pad, S));
      EXPECT_TRUE(bf.contains("sdpa.composite"));
      EXPECT_TENSOR_NEAR(to(composed, kFloat32), out, 3e-2, 3e-2);
    }
  }
}

TEST(Attention, QueriesWithEveryKeyMaskedGiveZerosAndNoNaN) {
  // As PyTorch's safe softmax: a row with no key left is zero, fused and composed, and its
  // gradients are zero (not NaN).
  Generator gen(9);
  Tensor mask = from_vector(std::vector<bool>{true, false, true, false}, {4, 1});  // rows 1 and 3: no key
  for (DType dt : {kFloat32, kBFloat16}) {
    Tensor q = randn({2, 4, 3}, gen, {dt, Device::cpu(), true}), k = randn({2, 6, 3}, gen, {dt, Device::cpu(), true});
    Tensor v = randn({2, 6, 3}, gen, {dt, Device::cpu(), true});
    Tensor out = scaled_dot_product_attention(q, k, v, false, std::nullopt, 0.0, default_generator(), false, mask);
    out.backward(full(out.shape(), 1.0, {dt}));
    const std::vector<float> o = to(out, kFloat32).to_vector<float>(), dq = to(q.grad(), kFloat32).to_vector<float>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t e = 0; e < 3; ++e) {
          const size_t at = static_cast<size_t>((b * 4 + i) * 3 + e);
          if (i % 2) EXPECT_EQ(o[at], 0.0f) << dtype_name(dt) << " row " << i;
          if (i % 2) EXPECT_EQ(dq[at], 0.0f) << dtype_name(dt) << " row " << i;
          EXPECT_FALSE(std::isnan(o[at]) || std::isnan(dq[at]));
        }
    for (const Tensor& gr : {k.grad(), v.grad()})
      for (float f : to(gr, kFloat32).to_vector<float>()) EXPECT_FALSE(std::isnan(f));
  }
}

TEST(Attention, MaskIsChecked) {
  Tensor q = zeros({2, 3, 4});
  EXPECT_ERROR_HAS(scaled_dot_product_attention(q, q, q, false, std::nullopt, 0.0, default_generator(), false,
                                                zeros({3, 3})),
                   "attn_mask must be bool", "float32");
  EXPECT_ERROR_HAS(scaled_dot_product_attention(q, q, q, true, std::nullopt, 0.0, default_generator(), false,
                                                ones({3, 3}, {kBool})),
                   "either attn_mask or is_causal");
  EXPECT_ERROR_HAS(scaled_dot_product_attention(q, q, q, false, std::nullopt, 0.0, default_generator(), false,
                                                ones({3, 2}, {kBool})),
                   "attn_mask of shape [3, 2] does not broadcast to [2, 3, 3]");
}

TEST(Attention, BackwardKeepsOnlyWhatTheWantedGradientsNeed) {
  // Only v trains: backward needs q, k and the logsumexp to rebuild the probabilities, not v
  // and the output (they feed dq and dk alone).
  Generator gen(4);
  Tensor q = randn({1, 2, 16, 8}, gen), k = randn({1, 2, 16, 8}, gen);
  Tensor v = randn({1, 2, 16, 8}, gen, {kFloat32, Device::cpu(), true});
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  const size_t qk_lse = 2 * q.nbytes() + 2 * 16 * sizeof(float);
  EXPECT_EQ(out.grad_fn()->saved_bytes(), qk_lse);
  Tensor q2 = randn({1, 2, 16, 8}, gen, {kFloat32, Device::cpu(), true});
  Tensor out2 = scaled_dot_product_attention(q2, k, v, true);
  EXPECT_EQ(out2.grad_fn()->saved_bytes(), qk_lse + v.nbytes() + out2.nbytes());
}

// banded_causal_attention's band by its definition: query i of row b sees keys j with first <= j
// <= i, first the largest max(i' - pos[i'], i' - window + 1, 0) over i' <= i. bool [rows, 1, L, S].
Tensor band_by_definition(const std::vector<int64_t>& pos, int64_t rows, int64_t L, int64_t S, int64_t window) {
  std::vector<bool> keep(static_cast<size_t>(rows * L * S));
  for (int64_t b = 0; b < rows; ++b) {
    int64_t first = 0;
    for (int64_t i = 0; i < L; ++i) {
      if (!pos.empty()) first = std::max(first, std::min(i, i - pos[b * L + i]));
      if (window > 0) first = std::max(first, i - window + 1);
      for (int64_t j = 0; j < S; ++j) keep[(b * L + i) * S + j] = j >= first && j <= i;
    }
  }
  return from_vector(keep, {rows, 1, L, S});
}

// Position ids of packed documents: 0..len-1 for each length, in order.
std::vector<int64_t> packed_positions(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> pos;
  for (int64_t n : lengths)
    for (int64_t t = 0; t < n; ++t) pos.push_back(t);
  return pos;
}

TEST(BandedAttention, FusedMatchesTheMaskOfItsDefinition) {
  // Packed documents that cross the CPU kernel's 32-query blocks, random position ids, windows
  // alone and with documents, grouped-query heads, more and fewer keys than queries.
  struct Case {
    std::string what;
    int64_t B, H, Hkv, L, S;
    std::vector<int64_t> pos;  // [B, L] (empty: none)
    int64_t window;
  };
  Generator gen(21);
  std::vector<int64_t> random_pos = to(randint(0, 6, {2, 40}, gen), kInt64).to_vector<int64_t>();
  std::vector<int64_t> docs = packed_positions({37, 1, 20, 3, 9, 30});
  std::vector<int64_t> docs2 = packed_positions({64, 36});
  docs.insert(docs.end(), docs2.begin(), docs2.end());
  const std::vector<Case> cases = {
      {"documents", 2, 4, 2, 100, 100, docs, 0},
      {"random positions", 2, 2, 2, 40, 40, random_pos, 0},
      {"window", 1, 3, 1, 70, 70, {}, 17},
      {"documents and window", 2, 2, 1, 100, 100, docs, 25},
      {"more keys", 2, 2, 2, 40, 47, random_pos, 5},
      {"fewer keys", 2, 2, 2, 40, 23, random_pos, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Shape qs{c.B, c.H, c.L, 8}, ks{c.B, c.Hkv, c.S, 8};
    const Tensor pos = c.pos.empty() ? Tensor() : from_vector(c.pos, {c.B, c.L});
    const Tensor keep = band_by_definition(c.pos, c.pos.empty() ? 1 : c.B, c.L, c.S, c.window);
    for (DType dt : {kFloat32, kFloat64}) {
      auto runs = [&](auto&& attention) {
        Generator g(7);
        Tensor q = randn(qs, g, {dt, Device::cpu(), true}), k = randn(ks, g, {dt, Device::cpu(), true});
        Tensor v = randn(ks, g, {dt, Device::cpu(), true});
        AttnRun r{attention(q, k, v)};
        r.out.backward(randn(r.out.shape(), g, {dt}));
        r.dq = q.grad(), r.dk = k.grad(), r.dv = v.grad();
        return r;
      };
      KernelTrace trace;
      AttnRun got = runs([&](const Tensor& q, const Tensor& k, const Tensor& v) {
        return banded_causal_attention(q, k, v, pos, c.window, std::nullopt, 0.0, default_generator(), c.H != c.Hkv);
      });
      EXPECT_TRUE(trace.contains("sdpa.fused_cpu"));
      AttnRun want = runs([&](const Tensor& q, const Tensor& k, const Tensor& v) {
        return scaled_dot_product_attention(q, k, v, false, std::nullopt, 0.0, default_generator(), c.H != c.Hkv, keep);
      });
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      EXPECT_TENSOR_NEAR(got.out, want.out, tol, tol);
      EXPECT_TENSOR_NEAR(got.dq, want.dq, tol, tol);
      EXPECT_TENSOR_NEAR(got.dk, want.dk, tol, tol);
      EXPECT_TENSOR_NEAR(got.dv, want.dv, tol, tol);
    }
    // banded_causal_mask is the same band
    EXPECT_TENSOR_EQ(banded_causal_mask(pos, c.window, c.L, c.S), c.pos.empty() ? reshape(keep, {c.L, c.S}) : keep);
  }
}

TEST(BandedAttention, EachPackedDocumentAsIfAlone) {
  // Three documents in one row give, document by document, causal attention over that document
  // alone: forward and every gradient. The composition (bfloat16 on the CPU) agrees.
  Generator gen(22);
  const std::vector<int64_t> lengths = {5, 33, 12};
  const int64_t H = 2, L = 50, E = 6;
  Tensor q = randn({1, H, L, E}, gen, {kFloat64, Device::cpu(), true}), k = randn({1, H, L, E}, gen, {kFloat64, Device::cpu(), true});
  Tensor v = randn({1, H, L, E}, gen, {kFloat64, Device::cpu(), true}), g = randn({1, H, L, E}, gen, {kFloat64});
  const Tensor pos = from_vector(packed_positions(lengths), {1, L});
  Tensor out = banded_causal_attention(q, k, v, pos);
  out.backward(g);
  int64_t at = 0;
  for (int64_t n : lengths) {
    auto part = [&](const Tensor& t) { return clone(slice(t.detach(), 2, at, at + n)).requires_grad_(true); };
    Tensor qd = part(q), kd = part(k), vd = part(v);
    Tensor want = scaled_dot_product_attention(qd, kd, vd, true);
    want.backward(slice(g, 2, at, at + n));
    EXPECT_TENSOR_NEAR(slice(out, 2, at, at + n), want, 1e-12, 1e-12);
    EXPECT_TENSOR_NEAR(slice(q.grad(), 2, at, at + n), qd.grad(), 1e-12, 1e-12);
    EXPECT_TENSOR_NEAR(slice(k.grad(), 2, at, at + n), kd.grad(), 1e-12, 1e-12);
    EXPECT_TENSOR_NEAR(slice(v.grad(), 2, at, at + n), vd.grad(), 1e-12, 1e-12);
    at += n;
  }
  KernelTrace trace;
  Tensor bf = banded_causal_attention(to(q.detach(), kBFloat16), to(k.detach(), kBFloat16), to(v.detach(), kBFloat16), pos);
  EXPECT_TRUE(trace.contains("sdpa.composite"));
  EXPECT_TENSOR_NEAR(to(bf, kFloat64), out.detach(), 3e-2, 3e-2);
}

TEST(BandedAttention, OneDocumentWithoutAWindowIsPlainCausal) {
  Generator gen(23);
  Tensor q = randn({2, 2, 9, 4}, gen), k = randn({2, 2, 9, 4}, gen), v = randn({2, 2, 9, 4}, gen);
  const Tensor want = scaled_dot_product_attention(q, k, v, true);
  EXPECT_TENSOR_EQ(banded_causal_attention(q, k, v, Tensor()), want);
  EXPECT_TENSOR_EQ(banded_causal_attention(q, k, v, Tensor(), 9), want);  // the window reaches every key
  EXPECT_TENSOR_NEAR(banded_causal_attention(q, k, v, arange(9)), want, 1e-6, 1e-6);
}

TEST(BandedAttention, InputsAreChecked) {
  Tensor q = zeros({2, 3, 5, 4});
  EXPECT_ERROR_HAS(banded_causal_attention(q, q, q, zeros({2, 5})), "banded_causal_attention", "position_ids must be int32 or int64", "float32");
  EXPECT_ERROR_HAS(banded_causal_attention(q, q, q, arange(4)), "position_ids must be [5] or [2, 5], got [4]");
  EXPECT_ERROR_HAS(banded_causal_attention(q, q, q, Tensor(), -1), "window must be >= 0 (0: none), got -1");
  EXPECT_ERROR_HAS(banded_causal_attention(zeros({5, 4}), zeros({5, 4}), zeros({5, 4}), arange(5)),
                   "wants q, k, v of 3 or 4 dims");
  EXPECT_ERROR_HAS(banded_causal_attention(zeros({3, 5, 4}), zeros({3, 5, 4}), zeros({3, 5, 4}), zeros({2, 5}, {kInt64})),
                   "position_ids must be [5], got [2, 5]");
  EXPECT_ERROR_HAS(banded_causal_mask(arange(4), -2, 4, 4), "banded_causal_mask", "window must be >= 0");
}

TEST(Rotary, FusedMatchesCompositeAndKeepsTheHeadLayout) {
  Generator gen(5);
  const int64_t B = 2, T = 9, H = 3, hd = 8;
  auto [cos, sin] = rotary_cos_sin(T, hd);
  Tensor proj = randn({B, T, H, hd}, gen, {kFloat32, Device::cpu(), true});
  Tensor g = randn({B, H, T, hd}, gen);
  // Fused: tables without gradients.
  KernelTrace trace;
  Tensor x = transpose(proj, 1, 2);
  Tensor out = apply_rotary(x, cos, sin);
  EXPECT_TRUE(trace.contains("apply_rotary.fused_cpu"));
  EXPECT_EQ(out.strides(), x.strides());  // [B, H, T, hd] view of [B, T, H, hd] memory
  EXPECT_EQ(out.grad_fn()->saved_bytes(), 2 * cos.nbytes());  // the tables, not x
  out.backward(g);
  Tensor dfused = proj.grad();
  // Composite: the same tables asking for gradients take the composition.
  Tensor cg = clone(cos).requires_grad_(true), sg = clone(sin).requires_grad_(true);
  Tensor proj2 = proj.detach().requires_grad_(true);
  KernelTrace trace2;
  Tensor want = apply_rotary(transpose(proj2, 1, 2), cg, sg);
  EXPECT_TRUE(trace2.contains("apply_rotary.composite"));
  want.backward(g);
  EXPECT_TENSOR_NEAR(out, want, 1e-6, 1e-6);
  EXPECT_TENSOR_NEAR(dfused, proj2.grad(), 1e-6, 1e-6);
  EXPECT_THROW(apply_rotary(randn({2, 3, 5}, gen), randn({3, 5}, gen), randn({3, 5}, gen)), Error);  // odd hd
}

TEST(Rotary, PerSequenceTablesAreEachSequencesOwn) {
  // [B, 1, T, hd] tables: sequence b rotated by its own table, bitwise as alone, and backward too.
  Generator gen(6);
  const int64_t B = 3, T = 7, H = 2, hd = 8;
  Tensor x = transpose(randn({B, T, H, hd}, gen), 1, 2).requires_grad_(true);
  Tensor cos = randn({B, 1, T, hd}, gen), sin = randn({B, 1, T, hd}, gen), g = randn({B, H, T, hd}, gen);
  KernelTrace trace;
  Tensor out = apply_rotary(x, cos, sin);
  EXPECT_TRUE(trace.contains("apply_rotary.fused_cpu"));
  out.backward(g);
  for (int64_t b = 0; b < B; ++b) {
    Tensor xb = clone(slice(x.detach(), 0, b, b + 1)).requires_grad_(true);
    Tensor want = apply_rotary(xb, reshape(slice(cos, 0, b, b + 1), {T, hd}), reshape(slice(sin, 0, b, b + 1), {T, hd}));
    want.backward(slice(g, 0, b, b + 1));
    EXPECT_TENSOR_EQ(contiguous(slice(out, 0, b, b + 1)), contiguous(want));
    EXPECT_TENSOR_EQ(contiguous(slice(x.grad(), 0, b, b + 1)), contiguous(xb.grad()));
  }
  EXPECT_ERROR_HAS(apply_rotary(x, randn({B, H, T, hd}, gen), sin), "cos and sin must be [7, 8] or [3, 1, 7, 8]");
}

TEST(Rotary, PosEmbIsTwoApplyRotaryCallsBitwise) {
  // q and k as head views of one projection, equal heads and GQA, shared and per-sequence tables,
  // one of them frozen (tests/attention_test_util.h); the CUDA side is AttentionCuda.RotaryPosEmb*.
  for (DType dt : {kFloat32, kFloat64}) {
    test::expect_pos_emb_is_two_apply_rotary(Device::cpu(), dt, 2, 9, 3, 3, 8, false, 1);
    test::expect_pos_emb_is_two_apply_rotary(Device::cpu(), dt, 2, 9, 4, 2, 16, false, 2);
    test::expect_pos_emb_is_two_apply_rotary(Device::cpu(), dt, 3, 7, 4, 1, 6, true, 3);
  }
}

TEST(Rotary, PosEmbChecksItsArguments) {
  Generator gen(7);
  Tensor cos, sin;  // not a structured binding: EXPECT_ERROR_HAS's lambda captures them (clang 14)
  std::tie(cos, sin) = rotary_cos_sin(5, 8);
  const Tensor q = randn({2, 4, 5, 8}, gen), k = randn({2, 2, 5, 8}, gen);
  EXPECT_ERROR_HAS(apply_rotary_pos_emb(q, randn({2, 2, 6, 8}, gen), cos, sin), "apply_rotary_pos_emb",
                   "for k [2, 2, 6, 8]");
  EXPECT_ERROR_HAS(apply_rotary_pos_emb(q, to(k, kFloat64), cos, sin), "apply_rotary_pos_emb", "k");
  EXPECT_ERROR_HAS(apply_rotary_pos_emb(randn({2, 4, 5, 7}, gen), k, randn({5, 7}, gen), randn({5, 7}, gen)),
                   "apply_rotary_pos_emb");
  // per-sequence tables want the same batch in q and k
  EXPECT_ERROR_HAS(apply_rotary_pos_emb(q, randn({3, 2, 5, 8}, gen), randn({2, 1, 5, 8}, gen), randn({2, 1, 5, 8}, gen)),
                   "cos and sin must be [5, 8] or [3, 1, 5, 8]");
  // tables that require grad, and CPU bfloat16: the two apply_rotary calls
  KernelTrace trace;
  auto [qe, ke] = apply_rotary_pos_emb(to(q, kBFloat16), to(k, kBFloat16), cos, sin);
  EXPECT_TRUE(trace.contains("apply_rotary_pos_emb.unfused"));
  EXPECT_TENSOR_EQ(ke, apply_rotary(to(k, kBFloat16), cos, sin));
}

// The GPU's sinks: the flash kernels' forward without them, then sdpa_add_sinks, gives the out
// and lse of the CPU kernel's forward with them (causal and not, grouped-query heads, sinks on
// both sides of the rows' largest scores and one far above them).
TEST(AttentionSinks, JoinedAfterTheForwardEqualTheKernelsOwn) {
  Generator gen(77);
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    const Tensor q = randn({2, 4, 9, 8}, gen), k = randn({2, 2, 11, 8}, gen), v = randn({2, 2, 11, 8}, gen);
    const Tensor sinks = from_vector(std::vector<float>{-3.0f, 0.5f, 2.5f, 40.0f}, {4});
    auto forward = [&](const Tensor& s, Tensor& out, Tensor& lse) {
      out = Tensor::empty({2, 4, 9, 8}, q.options()), lse = Tensor::empty({2, 4, 9}, q.options());
      cpu::sdpa_forward(out, lse, q, k, v, causal, 0.35, Tensor(), Tensor(), s);
    };
    Tensor want_out, want_lse, out, lse;
    forward(sinks, want_out, want_lse);
    forward(Tensor(), out, lse);
    sdpa_add_sinks(out, lse, sinks);
    EXPECT_TENSOR_NEAR(out, want_out, 1e-5, 1e-6);
    EXPECT_TENSOR_NEAR(lse, want_lse, 1e-5, 1e-6);
  }
}

}  // namespace
}  // namespace tg
