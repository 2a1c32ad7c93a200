#include "ops/apply_rotary.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/detail/layout.h"
#include "ops/apply_rotary_kernels.h"
#include "ops/shape.h"

namespace tg {
namespace {

// t itself when its last dim has unit stride (what the fused kernels read in place), else a
// contiguous copy.
Tensor unit_last(const Tensor& t) {
  NoGradGuard g;  // internal: the rotary node covers it
  return t.strides().back() == 1 || t.shape().back() == 1 ? t : contiguous(t);
}

// The gradient needs only the tables (x enters linearly), so they are all that is saved.
struct ApplyRotaryFusedBackward final : Node {
  const char* name() const override { return "apply_rotary"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    Tensor gc = unit_last(g[0]);
    KernelTrace::record(gc.device().is_cuda() ? "apply_rotary.fused_cuda_backward" : "apply_rotary.fused_cpu_backward");
    Tensor dx = empty_like_layout(gc);
    if (dx.numel() > 0) TG_DISPATCH(gc.device(), apply_rotary_backward, dx, gc, unpack(0), unpack(1));
    return {dx};
  }
};

// apply_rotary_pos_emb's node: inputs q, k; outputs q_embed, k_embed. One backward launch computes
// the masked gradients (dq, dk or both); an output no gradient reached gives zeros.
struct ApplyRotaryPosEmbBackward final : Node {
  const char* name() const override { return "apply_rotary_pos_emb"; }
  Shape shape[2];  // q's and k's, for the zeros of an output no gradient reached
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    const Tensor c = unpack(0), s = unpack(1);
    Tensor src[2], dst[2];
    for (int i = 0; i < 2; ++i) {
      if (!mask[i]) continue;
      if (!g[i].defined()) {
        dst[i] = zeros(shape[i], c.options());
        continue;
      }
      src[i] = unit_last(g[i]);
      dst[i] = empty_like_layout(src[i]);
      if (dst[i].numel() == 0) src[i] = Tensor();  // nothing to compute
    }
    if (src[0].defined() || src[1].defined()) {
      KernelTrace::record(c.device().is_cuda() ? "apply_rotary_pos_emb.fused_cuda_backward"
                                               : "apply_rotary_pos_emb.fused_cpu_backward");
      TG_DISPATCH(c.device(), apply_rotary_pair_backward, src[0].defined() ? dst[0] : Tensor(),
                  src[1].defined() ? dst[1] : Tensor(), src[0], src[1], c, s);
    }
    return {dst[0], dst[1]};
  }
};

// apply_rotary's argument checks for x (named `name` in errors) and the tables.
void check_rotary(const char* op, const char* name, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_floating(op, name, x);
  check_floating(op, "cos", cos);
  check_floating(op, "sin", sin);
  check_same(op, {{name, x}, {"cos", cos}, {"sin", sin}}, false);
  TG_CHECK(x.dim() >= 2, op, name, " must be [..., T, head_dim], got ", x.shape());
  const int64_t T = x.shape()[x.dim() - 2], hd = x.shape().back();
  const bool per_sequence = x.dim() == 4 && cos.dim() == 4;
  const Shape table = per_sequence ? Shape({x.shape()[0], 1, T, hd}) : Shape({T, hd});
  TG_CHECK(cos.shape() == table && sin.shape() == table, op, "cos and sin must be [", T, ", ", hd, "]",
           x.dim() == 4 ? " or [" + std::to_string(x.shape()[0]) + ", 1, " + std::to_string(T) + ", " +
                              std::to_string(hd) + "]"
                        : std::string(),
           " for ", name, " ", x.shape(), ", got cos ", cos.shape(), ", sin ", sin.shape());
  TG_CHECK(hd % 2 == 0, op, "head_dim (the last dim of ", name, ") must be even, got shape ", x.shape());
}

// The fused kernels' dtypes (ops/apply_rotary_kernels.h).
bool fused_applies(const Tensor& x) {
  if (x.device().is_cpu()) return x.dtype() == kFloat32 || x.dtype() == kFloat64;
  return x.dtype() == kFloat32 || x.dtype() == kBFloat16;
}

}  // namespace

Tensor rotate_half(const Tensor& x) {
  check_floating("rotate_half", "x", x);
  const int64_t hd = x.shape().back();
  TG_CHECK(hd % 2 == 0, "rotate_half", "the last dim must be even, got shape ", x.shape());
  Tensor lo = slice(x, -1, 0, hd / 2), hi = slice(x, -1, hd / 2, hd);
  return cat({neg(hi), lo}, -1);
}

Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_rotary("apply_rotary", "x", x, cos, sin);
  if (fused_applies(x) && !cos.requires_grad() && !sin.requires_grad()) {
    KernelTrace::record(x.device().is_cuda() ? "apply_rotary.fused_cuda" : "apply_rotary.fused_cpu");
    Tensor xc = unit_last(x), c, s;
    {
      NoGradGuard g;
      c = contiguous(to(cos, x.dtype())), s = contiguous(to(sin, x.dtype()));
    }
    Tensor out = empty_like_layout(xc);  // keeps a head-split view's layout (see ops/detail/layout.h)
    if (out.numel() > 0) TG_DISPATCH(x.device(), apply_rotary_forward, out, xc, c, s);
    if (auto node = record<ApplyRotaryFusedBackward>({{"x", x}}, {out}))
      node->saved = {SavedTensor(c, "cos"), SavedTensor(s, "sin")};
    return out;
  }
  KernelTrace::record("apply_rotary.composite");
  Tensor c = to(cos, x.dtype()), s = to(sin, x.dtype());
  return add(mul(x, c), mul(rotate_half(x), s));
}

std::pair<Tensor, Tensor> apply_rotary_pos_emb(const Tensor& q, const Tensor& k, const Tensor& cos, const Tensor& sin) {
  check_rotary("apply_rotary_pos_emb", "q", q, cos, sin);
  check_rotary("apply_rotary_pos_emb", "k", k, cos, sin);
  check_same("apply_rotary_pos_emb", {{"q", q}, {"k", k}});
  if (!fused_applies(q) || cos.requires_grad() || sin.requires_grad()) {
    KernelTrace::record("apply_rotary_pos_emb.unfused");
    return {apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)};
  }
  KernelTrace::record(q.device().is_cuda() ? "apply_rotary_pos_emb.fused_cuda" : "apply_rotary_pos_emb.fused_cpu");
  Tensor qc = unit_last(q), kc = unit_last(k), c, s;
  {
    NoGradGuard g;
    c = contiguous(to(cos, q.dtype())), s = contiguous(to(sin, q.dtype()));
  }
  Tensor oq = empty_like_layout(qc), ok = empty_like_layout(kc);  // keep head-split views' layouts
  const bool do_q = oq.numel() > 0, do_k = ok.numel() > 0;
  if (do_q || do_k)
    TG_DISPATCH(q.device(), apply_rotary_pair_forward, do_q ? oq : Tensor(), do_k ? ok : Tensor(),
                do_q ? qc : Tensor(), do_k ? kc : Tensor(), c, s);
  if (auto node = record<ApplyRotaryPosEmbBackward>({{"q", q}, {"k", k}}, {oq, ok})) {
    node->saved = {SavedTensor(c, "cos"), SavedTensor(s, "sin")};
    node->shape[0] = q.shape(), node->shape[1] = k.shape();
  }
  return {oq, ok};
}

std::vector<float> rotary_inv_freq(int64_t head_dim, double theta) {
  TG_CHECK(head_dim > 0 && head_dim % 2 == 0, "rotary_inv_freq", "wants an even head_dim, got ", head_dim);
  // float32 arithmetic, step by step as in transformers' LlamaRotaryEmbedding, so the tables
  // agree with a PyTorch reference to the last bit or so (angles reach T radians).
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(head_dim));
  return inv_freq;
}

std::pair<Tensor, Tensor> rotary_cos_sin(int64_t T, int64_t head_dim, double theta, Device device) {
  TG_CHECK(T >= 0, "rotary_cos_sin", "wants T >= 0, got ", T);
  return rotary_cos_sin(T, rotary_inv_freq(head_dim, theta), device);
}

std::pair<Tensor, Tensor> rotary_cos_sin(int64_t T, const std::vector<float>& inv_freq, Device device) {
  const auto half = static_cast<int64_t>(inv_freq.size()), head_dim = 2 * half;
  TG_CHECK(T >= 0 && half > 0, "rotary_cos_sin", "wants T >= 0 and frequencies, got T ", T, " and ", half);
  // Filled where they are allocated: tables of many positions are never held twice on the host.
  const Tensor c = Tensor::empty({T, head_dim}, {kFloat32}), s = Tensor::empty({T, head_dim}, {kFloat32});
  float* cp = c.data_ptr<float>();
  float* sp = s.data_ptr<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < head_dim; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[i % half];
      cp[t * head_dim + i] = std::cos(angle);
      sp[t * head_dim + i] = std::sin(angle);
    }
  if (device.is_cpu()) return {c, s};
  return {to(c, device), to(s, device)};
}

}  // namespace tg
