// CUDA layer_norm: forward and the seven backward variants. The kernels and their memory
// traffic are described in norm_device.cuh.
#include "ops/cuda/norm_launch.cuh"
#include "ops/layer_norm_kernels.h"

namespace tg::cuda {

using namespace normk;

void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& w, const Tensor& b, double eps) {
  dispatch_gpu_float(x.dtype(), "layer_norm", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch_forward<T, true>(y, Tensor(), mean, rstd, x, Tensor(), w, b, eps);
  });
}

// Calls f(bool_constant DX, DW, DB) for the runtime flags: one instantiation per variant.
template <class F>
void with_variant(bool dx, bool dw, bool db, F&& f) {
  using std::bool_constant;
  if (dx) {
    if (dw) return db ? f(bool_constant<true>{}, bool_constant<true>{}, bool_constant<true>{})
                      : f(bool_constant<true>{}, bool_constant<true>{}, bool_constant<false>{});
    return db ? f(bool_constant<true>{}, bool_constant<false>{}, bool_constant<true>{})
              : f(bool_constant<true>{}, bool_constant<false>{}, bool_constant<false>{});
  }
  if (dw) return db ? f(bool_constant<false>{}, bool_constant<true>{}, bool_constant<true>{})
                    : f(bool_constant<false>{}, bool_constant<true>{}, bool_constant<false>{});
  if (db) return f(bool_constant<false>{}, bool_constant<false>{}, bool_constant<true>{});
}

void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& partial,
                         const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  dispatch_gpu_float(dy.dtype(), "layer_norm", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    with_variant(dx.defined(), dw.defined(), db.defined(), [&](auto DX, auto DW, auto DB) {
      launch_backward<T, true, DX(), DW(), DB()>("layer_norm", dx, dw, db, partial, dy, x, w, mean, rstd, Tensor());
    });
  });
}

int64_t layer_norm_partial_rows(bool dx, bool dw, bool db, const Tensor& x) {
  int64_t rows = 0;
  dispatch_gpu_float(x.dtype(), "layer_norm", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    with_variant(dx, dw, db, [&](auto DX, auto DW, auto DB) {
      if constexpr (DW() || DB()) rows = partial_rows<T, true, DX(), DW(), DB()>(x);
    });
  });
  return rows;
}

}  // namespace tg::cuda
