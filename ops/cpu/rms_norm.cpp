// CPU rms_norm / fused_add_rms_norm kernels, and the parameter-gradient reduction that
// layer_norm shares (the templates are in ops/cpu/rms_norm_common.h).
#include "core/trace.h"
#include "ops/cpu/rms_norm_common.h"
#include "ops/rms_norm_kernels.h"

namespace tg::cpu {

void rms_norm_forward(const Tensor& y, const Tensor& r, const Tensor& rstd, const Tensor& x,
                      const Tensor& residual, const Tensor& w, double eps) {
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_detail::forward<T, false>(y, r, Tensor(), rstd, x, residual, w, Tensor(), eps);
  });
}

void rms_norm_backward(const char* op, const Tensor& dx, const Tensor& partial, const Tensor& dy,
                       const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres) {
  dispatch_floating(dy.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (dx.defined() && partial.defined())
      norm_detail::backward<T, false, true, true, false>(op, dx, partial, dy, x, w, Tensor(), rstd, dres);
    else if (dx.defined())
      norm_detail::backward<T, false, true, false, false>(op, dx, partial, dy, x, w, Tensor(), rstd, dres);
    else if (partial.defined())
      norm_detail::backward<T, false, false, true, false>(op, dx, partial, dy, x, w, Tensor(), rstd, dres);
  });
}

void norm_partial_rows(bool, bool, bool dw, bool db, const Tensor& x, int64_t& rows_out) {
  const int64_t dim = x.dim() ? x.shape().back() : 0, rows = dim ? x.numel() / dim : 0;
  rows_out = (dw || db) ? norm_detail::partial_rows(rows, dim) : 0;
}

void norm_param_reduce(const Tensor& dw, const Tensor& db, const Tensor& partial) {
  const Tensor& first = dw.defined() ? dw : db;
  const int64_t dim = first.numel(), P = partial.shape()[0], width = partial.shape()[1];
  dispatch_floating(first.dtype(), "norm_param_reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A* pp = partial.data_ptr<A>();
    if (dw.defined()) norm_detail::param_reduce<A>(dw.data_ptr<T>(), pp, P, width, 0, dim);
    if (db.defined()) norm_detail::param_reduce<A>(db.data_ptr<T>(), pp, P, width, dw.defined() ? dim : 0, dim);
  });
}

}  // namespace tg::cpu
