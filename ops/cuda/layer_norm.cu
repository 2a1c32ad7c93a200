// CUDA layer_norm: forward, the seven backward variants and their partial-buffer rows. The
// kernels are described in norm_device.cuh.
#include "ops/cuda/norm_launch.cuh"
#include "ops/layer_norm_kernels.h"

namespace tg::cuda {

using namespace normk;

void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& w, const Tensor& b, double eps) {
  dispatch_gpu_float(x.dtype(), "layer_norm", [&](auto tag) {
    launch_forward<typename decltype(tag)::type, true>(y, Tensor(), mean, rstd, x, Tensor(), w, b, eps);
  });
}

void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& partial,
                         const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  dispatch_gpu_float(dy.dtype(), "layer_norm", [&](auto tag) {
    with_norm_variant({dx.defined(), dw.defined(), db.defined()}, [&](auto DX, auto DW, auto DB) {
      launch_backward<typename decltype(tag)::type, true, DX(), DW(), DB()>("layer_norm", dx, dw, db, partial, dy, x, w,
                                                                           mean, rstd, Tensor());
    });
  });
}

int64_t layer_norm_partial_rows(NormGrads g, const Tensor& x) {
  int64_t rows = 0;
  dispatch_gpu_float(x.dtype(), "layer_norm", [&](auto tag) {
    with_norm_variant(g, [&](auto DX, auto DW, auto DB) {
      if constexpr (DW() || DB()) rows = partial_rows<typename decltype(tag)::type, true, DX(), DW(), DB()>(x);
    });
  });
  return rows;
}

}  // namespace tg::cuda
