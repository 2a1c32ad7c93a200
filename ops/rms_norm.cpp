#include "ops/rms_norm.h"

#include "ops/detail/norm_common.h"

namespace tg {
namespace {

using namespace norm_internal;

// Backward of rms_norm (inputs x, weight) and fused_add_rms_norm (inputs x, residual, weight;
// outputs y and r = x + residual). The mask picks the compiled kernel variant: dx (frozen weight:
// no partial buffer, no dW accumulation, no reduction), dx,dw, or dw (x needs no gradient: no dx
// pass). For the fused op dx and dresidual are one tensor: the y-path input gradient plus the
// gradient of r, added in the same pass.
struct RmsNormBackward final : Node {
  enum { kX, kWeight, kRstd };  // saved: the normalised input (x, or r when fused), w, rstd
  Shape x_shape;
  bool fused = false;
  bool has_weight = false;

  const char* name() const override { return fused ? "fused_add_rms_norm" : "rms_norm"; }
  bool wants_dx(const GradMask& m) const { return fused ? (m[0] || m[1]) : m[0]; }
  bool wants_dw(const GradMask& m) const { return m[fused ? 2 : 1]; }
  std::string variant(const GradMask& m) const override { return norm_variant({wants_dx(m), wants_dw(m), false}); }

  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    const bool dx_on = wants_dx(mask), dw_on = wants_dw(mask);
    const Tensor gy = g[0], gr = fused ? g[1] : Tensor();
    Tensor dx, dw;
    if (!gy.defined()) {  // fused, and only r was used: y contributes nothing
      if (dx_on) dx = gr;
      if (dw_on) {
        dw = Tensor::empty({x_shape.back()}, gr.options());
        zero_(dw);
      }
    } else {
      const Tensor x = unpack(kX);  // [rows, dim]
      const int64_t rows = x.shape()[0], dim = x.shape()[1];
      const Tensor dy = as_rows(gy);
      const Tensor rstd = unpack(kRstd);
      const Tensor w = dx_on && has_weight ? unpack(kWeight) : Tensor();
      const Tensor dres = dx_on && gr.defined() ? as_rows(gr) : Tensor();
      if (dx_on) dx = Tensor::empty({rows, dim}, dy.options());
      if (dw_on) dw = Tensor::empty({dim}, dy.options());
      const Tensor partial = partial_buffer(false, dx_on, dw_on, false, x);
      if (rows > 0) TG_DISPATCH(x.device(), rms_norm_backward, name(), dx, dw, partial, dy, x, w, rstd, dres);
      finish_param_grads(name(), dw, Tensor(), rows);
      if (dx_on) dx = dx.as_strided(x_shape, contiguous_strides(x_shape), 0);
    }
    if (!fused) return {mask[0] ? dx : Tensor(), dw};
    return {mask[0] ? dx : Tensor(), mask[1] ? dx : Tensor(), mask[2] ? dw : Tensor()};
  }
};

// rows_in: the [rows, dim] tensor to normalise (x, or x + residual written by the kernel).
std::pair<Tensor, Tensor> rms_norm_impl(const Tensor& x, const Tensor& residual, const Tensor& w, double eps) {
  const bool fused = residual.defined();
  const char* op = fused ? "fused_add_rms_norm" : "rms_norm";
  check_inputs(op, x, w, Tensor(), eps);
  if (fused) {
    check_floating(op, "residual", residual);
    check_same(op, {{"x", x}, {"residual", residual}});
    TG_CHECK(residual.shape() == x.shape(), op, "residual must have the shape of x ", x.shape(), ", got ",
             residual.shape());
  }
  const bool rec = fused ? needs_record({{"x", x}, {"residual", residual}, {"weight", w}})
                         : needs_record({{"x", x}, {"weight", w}});
  const Tensor x2 = as_rows(x), w2 = as_param(w);
  const Tensor res2 = fused ? as_rows(residual) : Tensor();
  const int64_t rows = x2.shape()[0], dim = x2.shape()[1];
  Tensor y = Tensor::empty(x.shape(), x.options());
  Tensor r = fused ? Tensor::empty(x.shape(), x.options()) : Tensor();
  const Tensor y2 = y.as_strided({rows, dim}, {dim, 1}, 0);
  const Tensor r2 = fused ? r.as_strided({rows, dim}, {dim, 1}, 0) : Tensor();
  // rstd only when a backward can ask for it.
  const Tensor rstd = rec ? Tensor::empty({rows}, {acc_dtype(x.dtype()), x.device()}) : Tensor();
  if (rows > 0) TG_DISPATCH(x.device(), rms_norm_forward, y2, r2, rstd, x2, res2, w2, eps);

  if (fused) {
    if (auto n = record<RmsNormBackward>({{"x", x}, {"residual", residual}, {"weight", w}}, {y, r})) {
      n->x_shape = x.shape();
      n->fused = true;
      n->has_weight = w.defined();
      const bool dx_possible = x.requires_grad() || residual.requires_grad();
      n->saved = {SavedTensor(r2, "r"), SavedTensor(dx_possible ? w2 : Tensor(), "weight"),
                  SavedTensor(rstd, "rstd")};
    }
  } else if (auto n = record<RmsNormBackward>({{"x", x}, {"weight", w}}, {y})) {
    n->x_shape = x.shape();
    n->has_weight = w.defined();
    // x and rstd serve both dx and dw; the weight only dx.
    n->saved = {SavedTensor(x2, "x"), SavedTensor(x.requires_grad() ? w2 : Tensor(), "weight"),
                SavedTensor(rstd, "rstd")};
  }
  return {y, r};
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) { return rms_norm_impl(x, Tensor(), w, eps).first; }

std::pair<Tensor, Tensor> fused_add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& w, double eps) {
  TG_CHECK(residual.defined(), "fused_add_rms_norm", "argument 'residual' is an undefined tensor");
  return rms_norm_impl(x, residual, w, eps);
}

}  // namespace tg
