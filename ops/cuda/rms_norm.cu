// CUDA rms_norm / fused_add_rms_norm and the partial-buffer query (shared with layer_norm). The
// kernels are described in norm_device.cuh.
#include "ops/cuda/norm_launch.cuh"
#include "ops/rms_norm_kernels.h"

namespace tg::cuda {

using namespace normk;

void rms_norm_forward(const Tensor& y, const Tensor& r, const Tensor& rstd, const Tensor& x,
                      const Tensor& residual, const Tensor& w, double eps) {
  dispatch_gpu_float(x.dtype(), "rms_norm", [&](auto tag) {
    launch_forward<typename decltype(tag)::type, false>(y, r, Tensor(), rstd, x, residual, w, Tensor(), eps);
  });
}

void rms_norm_backward(const char* op, const Tensor& dx, const Tensor& dw, const Tensor& partial, const Tensor& dy,
                       const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres) {
  dispatch_gpu_float(dy.dtype(), op, [&](auto tag) {
    with_norm_variant({dx.defined(), dw.defined(), false}, [&](auto DX, auto DW, auto DB) {
      if constexpr (!DB())
        launch_backward<typename decltype(tag)::type, false, DX(), DW(), false>(op, dx, dw, Tensor(), partial, dy, x,
                                                                                w, Tensor(), rstd, dres);
    });
  });
}

// In layer_norm.cu: the partial rows of a LayerNorm variant.
int64_t layer_norm_partial_rows(NormGrads g, const Tensor& x);

void norm_partial_rows(bool layer_norm, bool dx, bool dw, bool db, const Tensor& x, int64_t& rows_out) {
  rows_out = 0;
  if (!dw && !db) return;
  if (layer_norm) {
    rows_out = layer_norm_partial_rows({dx, dw, db}, x);
    return;
  }
  dispatch_gpu_float(x.dtype(), "rms_norm", [&](auto tag) {
    with_norm_variant({dx, dw, false}, [&](auto DX, auto DW, auto DB) {
      if constexpr (DW() && !DB()) rows_out = partial_rows<typename decltype(tag)::type, false, DX(), true, false>(x);
    });
  });
}

}  // namespace tg::cuda
