// CPU rms_norm / fused_add_rms_norm kernels, and the partial-buffer query layer_norm shares (the
// templates are in ops/cpu/norm_rows.h).
#include "ops/cpu/norm_rows.h"
#include "ops/rms_norm_kernels.h"

namespace tg::cpu {

void rms_norm_forward(const Tensor& y, const Tensor& r, const Tensor& rstd, const Tensor& x,
                      const Tensor& residual, const Tensor& w, double eps) {
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_detail::forward<T, false>(y, r, Tensor(), rstd, x, residual, w, Tensor(), eps);
  });
}

void rms_norm_backward(const char* op, const Tensor& dx, const Tensor& dw, const Tensor& partial, const Tensor& dy,
                       const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres) {
  dispatch_floating(dy.dtype(), op, [&](auto tag) {
    with_norm_variant({dx.defined(), dw.defined(), false}, [&](auto DX, auto DW, auto DB) {
      if constexpr (!DB())
        norm_detail::backward<typename decltype(tag)::type, false, DX(), DW(), false>(op, dx, dw, Tensor(), partial,
                                                                                     dy, x, w, Tensor(), rstd, dres);
    });
  });
}

void norm_partial_rows(bool, bool, bool dw, bool db, const Tensor& x, int64_t& rows_out) {
  const int64_t dim = x.dim() ? x.shape().back() : 0, rows = dim ? x.numel() / dim : 0;
  rows_out = (dw || db) ? norm_detail::partial_rows(rows, dim) : 0;
}

}  // namespace tg::cpu
