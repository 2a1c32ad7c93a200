#include "ops/attention.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/checks.h"
#include "ops/dropout.h"
#include "ops/masked_fill.h"
#include "ops/matmul.h"
#include "ops/shape.h"
#include "ops/softmax.h"

namespace tg {

Tensor causal_mask(int64_t L, int64_t S, Device device) {
  NoGradGuard g;
  // (j - i) > 0 from two broadcast ranges, without a host loop, on any device.
  Tensor i = reshape(arange(0, static_cast<double>(L), 1, {kFloat32, device}), {L, 1});
  Tensor j = reshape(arange(0, static_cast<double>(S), 1, {kFloat32, device}), {1, S});
  return to(relu(sub(j, i)), kBool);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                    std::optional<double> scale, double dropout_p, Generator& gen) {
  const char* op = "scaled_dot_product_attention";
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
  KernelTrace::record("sdpa.composite");

  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
  Tensor scores = mul(matmul(q, transpose(k, -2, -1)), s);  // [..., L, S]
  if (is_causal) scores = masked_fill(scores, causal_mask(L, S, q.device()), -std::numeric_limits<double>::infinity());
  Tensor p = softmax(scores, -1);
  if (dropout_p > 0.0) p = dropout(p, dropout_p, true, gen);
  return matmul(p, v);
}

}  // namespace tg
