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
  check_floating("apply_rotary", "x", x);
  check_floating("apply_rotary", "cos", cos);
  check_floating("apply_rotary", "sin", sin);
  check_same("apply_rotary", {{"x", x}, {"cos", cos}, {"sin", sin}}, false);
  TG_CHECK(x.dim() >= 2, "apply_rotary", "x must be [..., T, head_dim], got ", x.shape());
  const int64_t T = x.shape()[x.dim() - 2], hd = x.shape().back();
  const bool per_sequence = x.dim() == 4 && cos.dim() == 4;
  const Shape table = per_sequence ? Shape({x.shape()[0], 1, T, hd}) : Shape({T, hd});
  TG_CHECK(cos.shape() == table && sin.shape() == table, "apply_rotary", "cos and sin must be [", T, ", ", hd, "]",
           x.dim() == 4 ? " or [" + std::to_string(x.shape()[0]) + ", 1, " + std::to_string(T) + ", " +
                              std::to_string(hd) + "]"
                        : std::string(),
           " for x ", x.shape(), ", got cos ", cos.shape(), ", sin ", sin.shape());
  TG_CHECK(hd % 2 == 0, "apply_rotary", "head_dim (the last dim of x) must be even, got shape ", x.shape());
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
  std::vector<float> c(static_cast<size_t>(T * head_dim)), s(c.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < head_dim; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[i % half];
      c[t * head_dim + i] = std::cos(angle);
      s[t * head_dim + i] = std::sin(angle);
    }
  return {from_vector(c, {T, head_dim}, device), from_vector(s, {T, head_dim}, device)};
}

}  // namespace tg
