#include "ops/layer_norm.h"

#include "ops/layer_norm_kernels.h"
#include "ops/detail/norm_common.h"

namespace tg {
namespace {

using namespace norm_internal;

// Backward of layer_norm (inputs x, weight, bias). The mask picks one of seven compiled kernel
// variants: a frozen weight or bias gets no partial buffer and no accumulation, both frozen no
// reduction; x needing no gradient skips the dx computation (and dB alone reads only dy).
struct LayerNormBackward final : Node {
  enum { kX, kWeight, kMean, kRstd };
  Shape x_shape;
  bool has_weight = false;

  const char* name() const override { return "layer_norm"; }
  std::string variant(const GradMask& m) const override { return norm_variant({m[0], m[1], m[2]}); }

  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    const bool dx_on = mask[0], dw_on = mask[1], db_on = mask[2];
    const bool need_x = dx_on || dw_on;  // dB = sum of dy needs neither x nor the statistics
    const Tensor dy = as_rows(g[0]);
    const int64_t rows = dy.shape()[0], dim = dy.shape()[1];
    const Tensor x = need_x ? unpack(kX) : Tensor();
    const Tensor mean = need_x ? unpack(kMean) : Tensor();
    const Tensor rstd = need_x ? unpack(kRstd) : Tensor();
    const Tensor w = dx_on && has_weight ? unpack(kWeight) : Tensor();
    Tensor dx = dx_on ? Tensor::empty({rows, dim}, dy.options()) : Tensor();
    const Tensor dw = dw_on ? Tensor::empty({dim}, dy.options()) : Tensor();
    const Tensor db = db_on ? Tensor::empty({dim}, dy.options()) : Tensor();
    const Tensor partial = partial_buffer(true, dx_on, dw_on, db_on, dy);
    if (rows > 0) TG_DISPATCH(dy.device(), layer_norm_backward, dx, dw, db, partial, dy, x, w, mean, rstd);
    finish_param_grads("layer_norm", dw, db, rows);
    if (dx_on) dx = dx.as_strided(x_shape, contiguous_strides(x_shape), 0);
    return {dx, dw, db};
  }
};

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  check_inputs("layer_norm", x, w, b, eps);
  // Statistics only when a gradient that needs them can be asked (dx or dw; db needs none).
  const bool rec = needs_record({{"x", x}, {"weight", w}, {"bias", b}});
  const bool stats = rec && (x.requires_grad() || (w.defined() && w.requires_grad()));
  const Tensor x2 = as_rows(x), w2 = as_param(w), b2 = as_param(b);
  const int64_t rows = x2.shape()[0], dim = x2.shape()[1];
  Tensor y = Tensor::empty(x.shape(), x.options());
  const Tensor y2 = y.as_strided({rows, dim}, {dim, 1}, 0);
  const TensorOptions sopts{acc_dtype(x.dtype()), x.device()};
  const Tensor mean = stats ? Tensor::empty({rows}, sopts) : Tensor();
  const Tensor rstd = stats ? Tensor::empty({rows}, sopts) : Tensor();
  if (rows > 0) TG_DISPATCH(x.device(), layer_norm_forward, y2, mean, rstd, x2, w2, b2, eps);
  if (auto n = record<LayerNormBackward>({{"x", x}, {"weight", w}, {"bias", b}}, {y})) {
    n->x_shape = x.shape();
    n->has_weight = w.defined();
    n->saved = {SavedTensor(stats ? x2 : Tensor(), "x"), SavedTensor(x.requires_grad() ? w2 : Tensor(), "weight"),
                SavedTensor(mean, "mean"), SavedTensor(rstd, "rstd")};
  }
  return y;
}

}  // namespace tg
