// CUDA rms_norm / fused_add_rms_norm and the partial-buffer query (shared with layer_norm). The
// kernels and their memory traffic are described in norm_device.cuh.
#include "ops/cuda/norm_launch.cuh"
#include "ops/rms_norm_kernels.h"

namespace tg::cuda {

using namespace normk;

void rms_norm_forward(const Tensor& y, const Tensor& r, const Tensor& rstd, const Tensor& x,
                      const Tensor& residual, const Tensor& w, double eps) {
  dispatch_gpu_float(x.dtype(), "rms_norm", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch_forward<T, false>(y, r, Tensor(), rstd, x, residual, w, Tensor(), eps);
  });
}

void rms_norm_backward(const char* op, const Tensor& dx, const Tensor& dw, const Tensor& partial, const Tensor& dy,
                       const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres) {
  dispatch_gpu_float(dy.dtype(), op, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const Tensor none;
    if (dx.defined() && dw.defined())
      launch_backward<T, false, true, true, false>(op, dx, dw, none, partial, dy, x, w, none, rstd, dres);
    else if (dx.defined())
      launch_backward<T, false, true, false, false>(op, dx, dw, none, partial, dy, x, w, none, rstd, dres);
    else if (dw.defined())
      launch_backward<T, false, false, true, false>(op, dx, dw, none, partial, dy, x, w, none, rstd, dres);
  });
}

// Declared in layer_norm.cu: the partial rows of a LayerNorm variant.
int64_t layer_norm_partial_rows(bool dx, bool dw, bool db, const Tensor& x);

void norm_partial_rows(bool layer_norm, bool dx, bool dw, bool db, const Tensor& x, int64_t& rows_out) {
  rows_out = 0;
  if (!dw && !db) return;
  if (layer_norm) {
    rows_out = layer_norm_partial_rows(dx, dw, db, x);
    return;
  }
  dispatch_gpu_float(x.dtype(), "rms_norm", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    rows_out = dx ? partial_rows<T, false, true, true, false>(x) : partial_rows<T, false, false, true, false>(x);
  });
}

}  // namespace tg::cuda
