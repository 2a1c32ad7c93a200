// CUDA rms_norm / fused_add_rms_norm, the backward plan query and the dW/dB reduction (shared
// with layer_norm). The kernels and their memory traffic are described in rms_norm_common.cuh.
#include "ops/cuda/rms_norm_common.cuh"
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

void rms_norm_backward(const char* op, const Tensor& dx, const Tensor& partial, const Tensor& dy,
                       const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres) {
  dispatch_gpu_float(dy.dtype(), op, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const Tensor none;
    if (dx.defined() && partial.defined())
      launch_backward<T, false, true, true, false>(op, dx, partial, dy, x, w, none, rstd, dres);
    else if (dx.defined())
      launch_backward<T, false, true, false, false>(op, dx, partial, dy, x, w, none, rstd, dres);
    else if (partial.defined())
      launch_backward<T, false, false, true, false>(op, dx, partial, dy, x, w, none, rstd, dres);
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

void norm_param_reduce(const Tensor& dw, const Tensor& db, const Tensor& partial) {
  const Tensor& first = dw.defined() ? dw : db;
  const int dim = static_cast<int>(first.numel());
  const int P = static_cast<int>(partial.shape()[0]), width = static_cast<int>(partial.shape()[1]);
  cudaStream_t s = stream_for(partial);
  dispatch_gpu_float(first.dtype(), "norm_param_reduce", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* second = dw.defined() && db.defined() ? db.data_ptr<T>() : nullptr;
    // A programmatic dependent launch on Hopper and later (see wait_for_prerequisite_grid).
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((width + 31) / 32);
    cfg.blockDim = dim3(32, 32);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = compute_major(partial.device().index) >= 9 ? 1 : 0;
    TG_CUDA_CHECK(cudaLaunchKernelEx(&cfg, param_reduce_kernel<T>, first.data_ptr<T>(), second,
                                     static_cast<const float*>(partial.data_ptr<float>()), P, width, dim));
  });
  TG_CUDA_CHECK_LAUNCH("norm_param_reduce");
}

}  // namespace tg::cuda
