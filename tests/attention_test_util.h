// What the GPU attention tests share (tests/test_attention_cuda.cpp: the flash kernels,
// tests/test_attention_cudnn.cpp: cuDNN's): inputs in the layout the models give them ([B, H,
// T, hd] views of [B, T, H, hd] projections), a run of forward and backward on leaves, errors
// against float64, a NaN-poisoned allocator so unwritten elements show, a tiny Llama's step, and
// a scope that turns cuDNN attention on or off.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/cuda_settings.h"
#include "core/factory.h"
#include "core/trace.h"
#include "nn/models/llama.h"
#include "ops/apply_rotary.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/shape.h"

namespace tg::test {

inline const Device kGpu = Device::cuda(0);

struct Case {
  int64_t B, H, Hkv, L, S, hd;
  bool causal;
};

inline std::string name_of(const Case& c) {
  return "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " Hkv" + std::to_string(c.Hkv) + " L" +
         std::to_string(c.L) + " S" + std::to_string(c.S) + " hd" + std::to_string(c.hd) +
         (c.causal ? " causal" : " full");
}

struct Grads {
  Tensor out, dq, dk, dv;
};

// [B, heads, T, hd] as the transpose of a [B, T, heads, hd] tensor (how the model splits heads).
inline Tensor head_view(const Tensor& projection) { return transpose(projection, 1, 2); }

// A band for banded_causal_attention: position ids [B, L] (undefined: none) and a window (0: none).
struct Band {
  Tensor position_ids;
  int64_t window = 0;
  bool on() const { return position_ids.defined() || window > 0; }
};

// Forward and backward of sdpa (or, with a band, banded_causal_attention) on leaves (q, k, v in
// [B, T, heads, hd] memory) against `dout`.
inline Grads run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, bool causal,
                 std::array<bool, 3> wants = {true, true, true}, const Band& band = {}) {
  Tensor lq = q.detach().requires_grad_(wants[0]), lk = k.detach().requires_grad_(wants[1]),
         lv = v.detach().requires_grad_(wants[2]);
  const bool gqa = q.shape()[2] != k.shape()[2];
  Tensor pos = band.position_ids.defined() ? to(band.position_ids, q.device()) : Tensor();
  Tensor out = band.on() ? banded_causal_attention(head_view(lq), head_view(lk), head_view(lv), pos, band.window,
                                                   std::nullopt, 0.0, default_generator(), gqa)
                         : scaled_dot_product_attention(head_view(lq), head_view(lk), head_view(lv), causal,
                                                        std::nullopt, 0.0, default_generator(), gqa);
  if (wants[0] || wants[1] || wants[2]) out.backward(dout);
  return {out.detach(), lq.grad(), lk.grad(), lv.grad()};
}

// ||got - want|| / ||want|| and max |got - want| / max |want|, both in float64 on the CPU.
inline std::pair<double, double> errors(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = contiguous(to(got, kFloat64, Device::cpu())).to_vector<double>();
  const std::vector<double> w = contiguous(to(want, kFloat64, Device::cpu())).to_vector<double>();
  double norm = 0, diff = 0, wmax = 0, dmax = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double d = std::abs(g[i] - w[i]);
    norm += w[i] * w[i], diff += d * d;
    wmax = std::max(wmax, std::abs(w[i]));
    dmax = std::isnan(d) ? d : std::max(dmax, d);
  }
  return {std::sqrt(diff / norm), dmax / wmax};
}

inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : contiguous(to(t, kFloat64, Device::cpu())).to_vector<double>()) m = std::isnan(x) ? x : std::max(m, std::abs(x));
  return m;
}

// bf16 operands and outputs: a relative error of a few 2^-9 roundings per element.
inline constexpr double kRelTol = 1e-2, kMaxTol = 3e-2;

inline void expect_close(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_TRUE(got.defined()) << what;
  if (max_abs(want) == 0.0) {  // e.g. dq and dk when every query sees one key: dS = P (dP - delta) = 0
    EXPECT_LT(max_abs(got), kMaxTol) << what << ": the reference is zero (inputs are of order 1)";
    return;
  }
  auto [rel, mx] = errors(got, want);
  EXPECT_LT(rel, kRelTol) << what << ": relative error " << rel;
  EXPECT_LT(mx, kMaxTol) << what << ": max error / max " << mx;
  EXPECT_FALSE(std::isnan(rel) || std::isnan(mx)) << what << " has NaN (an element not written?)";
}

// The output and every gradient within bf16 tolerances of the reference.
inline void expect_all_close(const Grads& got, const Grads& want) {
  expect_close(got.out, want.out, "out");
  expect_close(got.dq, want.dq, "dq");
  expect_close(got.dk, want.dk, "dk");
  expect_close(got.dv, want.dv, "dv");
}

// Leaves the caching allocator holding NaN-filled blocks of the sizes the op will ask for, so an
// element a kernel forgets to write shows up as NaN.
inline void poison_allocator(const Case& c) {
  NoGradGuard g;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t n : {c.B * c.L * c.H * c.hd, c.B * c.S * c.Hkv * c.hd, c.B * c.H * c.L})
    for (DType dt : {kBFloat16, kFloat32}) full({n}, nan, {dt, kGpu});
}

// One case on the GPU against float64 on the CPU, out and every gradient; `kernel` is the forward's
// trace name, `backward` the backward's; with a band, banded_causal_attention's.
inline void check_case(const Case& c, uint64_t seed, const char* kernel, const char* backward, const Band& band = {}) {
  SCOPED_TRACE(name_of(c));
  Generator gen(seed);
  // Inputs drawn on the CPU, rounded to bf16; the reference runs in float64 on those values.
  Tensor q = to(randn({c.B, c.L, c.H, c.hd}, gen), kBFloat16), k = to(randn({c.B, c.S, c.Hkv, c.hd}, gen), kBFloat16);
  Tensor v = to(randn({c.B, c.S, c.Hkv, c.hd}, gen), kBFloat16), dout = to(randn({c.B, c.H, c.L, c.hd}, gen), kBFloat16);
  Grads want = run(to(q, kFloat64), to(k, kFloat64), to(v, kFloat64), to(dout, kFloat64), c.causal, {true, true, true},
                   band);
  poison_allocator(c);
  KernelTrace trace;
  Grads got = run(to(q, kGpu), to(k, kGpu), to(v, kGpu), to(dout, kGpu), c.causal, {true, true, true}, band);
  EXPECT_TRUE(trace.contains(kernel)) << trace.str();
  EXPECT_TRUE(trace.contains(backward)) << trace.str();
  if (std::string(kernel) != "sdpa.composite") EXPECT_FALSE(trace.contains("sdpa.composite")) << trace.str();
  expect_all_close(got, want);
}

// A tiny Llama's loss on the GPU in bf16 with its backward (the trace of both kept), and the
// same model's float32 loss on the CPU.
struct LlamaStep {
  double got = 0, want = 0;
  std::vector<std::string> events;
  size_t count(const std::string& e) const { return static_cast<size_t>(std::count(events.begin(), events.end(), e)); }
  bool contains(const std::string& e) const { return count(e) > 0; }
};

inline LlamaStep llama_step(const nn::LlamaConfig& cfg, int64_t T, uint64_t seed) {
  Generator gen(seed);
  auto model = std::make_shared<nn::LlamaForCausalLM>(cfg, gen);
  Tensor ids = randint(0, cfg.vocab_size, {2, T}, gen, {kInt64});
  LlamaStep step;
  step.want = model->loss(ids, ids).item<double>();
  model->to(kBFloat16, kGpu);
  KernelTrace trace;
  Tensor got = model->loss(to(ids, kGpu), to(ids, kGpu));
  got.backward();
  step.got = got.item<double>();
  step.events = trace.events();
  return step;
}

// cuDNN attention on or off for a scope (tg::enable_cudnn_sdp), then as it was.
class CudnnSdpScope {
 public:
  explicit CudnnSdpScope(bool enabled) : was_(cudnn_sdp_enabled()) { enable_cudnn_sdp(enabled); }
  ~CudnnSdpScope() { enable_cudnn_sdp(was_); }
  CudnnSdpScope(const CudnnSdpScope&) = delete;
  CudnnSdpScope& operator=(const CudnnSdpScope&) = delete;

 private:
  bool was_;
};

// apply_rotary_pos_emb against two apply_rotary calls on the same inputs, bitwise, forward and
// backward (outputs, their layouts, the gradients): q [B, H, T, hd] and k [B, Hkv, T, hd] as
// head views of one [B, T, (H + 2 Hkv) hd] projection (as nn::forward_group gives them), shared
// [T, hd] or per-sequence [B, 1, T, hd] tables; then with k frozen and with q frozen, only the
// other's gradient, still bitwise. One forward and one backward event in `dev`'s trace.
inline void expect_pos_emb_is_two_apply_rotary(Device dev, DType dt, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                               int64_t hd, bool per_sequence, uint64_t seed) {
  SCOPED_TRACE("B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + " Hkv" +
               std::to_string(Hkv) + " hd" + std::to_string(hd) + (per_sequence ? " per-sequence" : "") + " " +
               dtype_name(dt) + " " + dev.str());
  Generator gen(seed);
  const int64_t W = (H + 2 * Hkv) * hd;
  const Tensor proj = to(randn({B, T, W}, gen), dt, dev);
  auto heads = [&](const Tensor& p, int64_t first, int64_t n) {
    return transpose(reshape(slice(p, 2, first * hd, (first + n) * hd), {B, T, n, hd}), 1, 2);
  };
  Tensor cos, sin;
  if (per_sequence) {
    cos = to(randn({B, 1, T, hd}, gen), dev), sin = to(randn({B, 1, T, hd}, gen), dev);
  } else {
    std::tie(cos, sin) = rotary_cos_sin(T, hd, 10000.0, dev);
  }
  const Tensor gq = to(randn({B, H, T, hd}, gen), dt, dev), gk = to(randn({B, Hkv, T, hd}, gen), dt, dev);
  const std::string fused = dev.is_cuda() ? "apply_rotary_pos_emb.fused_cuda" : "apply_rotary_pos_emb.fused_cpu";
  EXPECT_EQ(heads(proj, H, Hkv).strides(), (Shape{T * W, hd, W, 1}));  // views of the projection, not copies

  // both from one projection
  Tensor pa = proj.detach().requires_grad_(true), pb = clone(proj).requires_grad_(true);
  KernelTrace trace;
  auto [qe, ke] = apply_rotary_pos_emb(heads(pa, 0, H), heads(pa, H, Hkv), cos, sin);
  backward({qe, ke}, {gq, gk});
  EXPECT_EQ(trace.count(fused), 1u);
  EXPECT_EQ(trace.count(fused + "_backward"), 1u);
  Tensor qr = apply_rotary(heads(pb, 0, H), cos, sin), kr = apply_rotary(heads(pb, H, Hkv), cos, sin);
  backward({qr, kr}, {gq, gk});
  EXPECT_EQ(qe.strides(), qr.strides());
  EXPECT_EQ(ke.strides(), kr.strides());
  EXPECT_TENSOR_EQ(contiguous(qe), contiguous(qr));
  EXPECT_TENSOR_EQ(contiguous(ke), contiguous(kr));
  EXPECT_TENSOR_EQ(pa.grad(), pb.grad());

  // one of them frozen: the other's gradient alone
  for (bool q_frozen : {false, true}) {
    SCOPED_TRACE(q_frozen ? "q frozen" : "k frozen");
    Tensor q = heads(proj.detach(), 0, H).requires_grad_(!q_frozen);
    Tensor k = heads(proj.detach(), H, Hkv).requires_grad_(q_frozen);
    auto [q2, k2] = apply_rotary_pos_emb(q, k, cos, sin);
    backward({q2, k2}, {gq, gk});
    EXPECT_EQ(q.grad().defined(), !q_frozen);
    EXPECT_EQ(k.grad().defined(), q_frozen);
    const Tensor got = q_frozen ? k.grad() : q.grad();
    const int64_t first = q_frozen ? H : 0, n = q_frozen ? Hkv : H;
    const Tensor want = reshape(contiguous(slice(pb.grad(), 2, first * hd, (first + n) * hd)), {B, T, n, hd});
    if (got.defined()) EXPECT_TENSOR_EQ(contiguous(transpose(got, 1, 2)), want);
  }
}

}  // namespace tg::test
