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
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/cuda_settings.h"
#include "core/factory.h"
#include "core/trace.h"
#include "nn/llama.h"
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
  expect_close(got.out, want.out, "out");
  expect_close(got.dq, want.dq, "dq");
  expect_close(got.dk, want.dk, "dk");
  expect_close(got.dv, want.dv, "dv");
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

}  // namespace tg::test
