// CPU layer_norm kernels (the templates are in ops/cpu/norm_rows.h).
#include "ops/cpu/norm_rows.h"
#include "ops/layer_norm_kernels.h"

namespace tg::cpu {

void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& w, const Tensor& b, double eps) {
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_detail::forward<T, true>(y, Tensor(), mean, rstd, x, Tensor(), w, b, eps);
  });
}

void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& partial,
                         const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  dispatch_floating(dy.dtype(), "layer_norm", [&](auto tag) {
    with_norm_variant({dx.defined(), dw.defined(), db.defined()}, [&](auto DX, auto DW, auto DB) {
      norm_detail::backward<typename decltype(tag)::type, true, DX(), DW(), DB()>("layer_norm", dx, dw, db, partial, dy,
                                                                                 x, w, mean, rstd, Tensor());
    });
  });
}

}  // namespace tg::cpu
