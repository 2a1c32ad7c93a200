#include "ops/attention.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/trace.h"
#include "ops/attention_kernels.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/checks.h"
#include "ops/dropout.h"
#include "ops/layout.h"
#include "ops/masked_fill.h"
#include "ops/matmul.h"
#include "ops/shape.h"
#include "ops/softmax.h"

namespace tg {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// t itself when its last dim has unit stride (what the fused kernels read in place), else a
// contiguous copy.
Tensor unit_last(const Tensor& t) {
  NoGradGuard g;  // internal: the attention node covers it
  return t.strides().back() == 1 || t.shape().back() == 1 ? t : contiguous(t);
}

// Saves q, k and the per-row logsumexp; v and the output only when dq or dk can be asked for
// (dv needs neither). Backward recomputes the probabilities (ops/attention_kernels.h).
struct SdpaFusedBackward final : Node {
  enum { kQ, kK, kV, kOut, kLse };
  bool causal = false;
  double scale = 1.0;
  Shape v_shape, v_strides;  // dv's layout (v itself may not be saved)
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    KernelTrace::record("sdpa.fused_cpu_backward");
    Tensor q = unpack(kQ), k = unpack(kK), lse = unpack(kLse);
    Tensor v = mask[0] || mask[1] ? unpack(kV) : Tensor(), out = mask[0] || mask[1] ? unpack(kOut) : Tensor();
    Tensor dout = unit_last(g[0]);
    Tensor dq = mask[0] ? empty_with_layout(q.shape(), q.strides(), q.options()) : Tensor();
    Tensor dk = mask[1] ? empty_with_layout(k.shape(), k.strides(), k.options()) : Tensor();
    Tensor dv = mask[2] ? empty_with_layout(v_shape, v_strides, k.options()) : Tensor();
    cpu::sdpa_backward(dq, dk, dv, dout, q, k, v, out, lse, causal, scale);
    return {dq, dk, dv};
  }
};

// The output: [B, H, L, Ev] for 4-D inputs is a view of [B, L, H, Ev] memory (as PyTorch's CPU
// flash attention), so the usual merge of heads back to [B, L, H * Ev] is free.
Tensor empty_output(const Tensor& q, int64_t Ev) {
  Shape shape = q.shape();
  shape.back() = Ev;
  if (shape.size() != 4) return Tensor::empty(shape, q.options());
  const int64_t H = shape[1], L = shape[2];
  return Tensor::empty(shape, q.options()).as_strided(shape, {L * H * Ev, Ev, H * Ev, 1}, 0);
}

Tensor sdpa_fused(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, double s) {
  KernelTrace::record("sdpa.fused_cpu");
  Tensor qc = unit_last(q), kc = unit_last(k), vc = unit_last(v);
  const int64_t n = q.dim();
  Tensor out = empty_output(q, v.shape()[n - 1]);
  Shape lse_shape(q.shape().begin(), q.shape().end() - 1);
  Tensor lse = Tensor::empty(lse_shape, {q.dtype() == kFloat64 ? kFloat64 : kFloat32, q.device()});
  cpu::sdpa_forward(out, lse, qc, kc, vc, is_causal, s);
  if (auto node = record<SdpaFusedBackward>({{"q", q}, {"k", k}, {"v", v}}, {out})) {
    node->causal = is_causal;
    node->scale = s;
    node->v_shape = vc.shape();
    node->v_strides = vc.strides();
    const bool dqk = q.requires_grad() || k.requires_grad();
    node->saved = {SavedTensor(qc, "q"), SavedTensor(kc, "k"), SavedTensor(dqk ? vc : Tensor(), "v"),
                   SavedTensor(dqk ? out : Tensor(), "out"), SavedTensor(lse, "lse")};
  }
  return out;
}

}  // namespace

Tensor causal_mask(int64_t L, int64_t S, Device device) {
  NoGradGuard g;
  // (j - i) > 0 from two broadcast ranges, without a host loop, on any device.
  Tensor i = reshape(arange(0, static_cast<double>(L), 1, {kFloat32, device}), {L, 1});
  Tensor j = reshape(arange(0, static_cast<double>(S), 1, {kFloat32, device}), {1, S});
  return to(relu(sub(j, i)), kBool);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                    std::optional<double> scale, double dropout_p, Generator& gen) {
  const char* op = kOp;
  check_floating(op, "q", q);
  check_floating(op, "k", k);
  check_floating(op, "v", v);
  check_same(op, {{"q", q}, {"k", k}, {"v", v}});
  TG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op,
           "q, k, v must have the same number of dims (>= 2), got q ", q.shape(), ", k ", k.shape(), ", v ", v.shape());
  const int64_t n = q.dim(), L = q.shape()[n - 2], S = k.shape()[n - 2], E = q.shape()[n - 1];
  TG_CHECK(k.shape()[n - 1] == E, op, "q has head_dim ", E, " but k has ", k.shape()[n - 1], " (q ", q.shape(),
           ", k ", k.shape(), ")");
  TG_CHECK(v.shape()[n - 2] == S, op, "k has ", S, " keys but v has ", v.shape()[n - 2], " values (k ", k.shape(),
           ", v ", v.shape(), ")");
  for (int64_t d = 0; d < n - 2; ++d)
    TG_CHECK(q.shape()[d] == k.shape()[d] && q.shape()[d] == v.shape()[d], op, "leading dims differ: q ", q.shape(),
             ", k ", k.shape(), ", v ", v.shape(), " (repeat grouped kv heads before attention)");
  TG_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, "dropout_p must be in [0, 1), got ", dropout_p);
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
  if (q.device().is_cpu() && (q.dtype() == kFloat32 || q.dtype() == kFloat64) && dropout_p == 0.0)
    return sdpa_fused(q, k, v, is_causal, s);

  KernelTrace::record("sdpa.composite");
  Tensor scores = mul(matmul(q, transpose(k, -2, -1)), s);  // [..., L, S]
  if (is_causal) scores = masked_fill(scores, causal_mask(L, S, q.device()), -std::numeric_limits<double>::infinity());
  Tensor p = softmax(scores, -1);
  if (dropout_p > 0.0) p = dropout(p, dropout_p, true, gen);
  return matmul(p, v);
}

}  // namespace tg
