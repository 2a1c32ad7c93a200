// Backend contract for layer_norm. Shapes and dtypes as in ops/rms_norm_kernels.h (whose
// norm_partial_rows layer_norm uses too).
#pragma once

#include "core/tensor.h"
#include "ops/rms_norm_kernels.h"

namespace tg {
namespace cpu {
// y = (x - mean) * rstd * w + b; mean and rstd written when defined.
void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& w, const Tensor& b, double eps);
// dx, dw, db when defined; dw and db summed through partial [P, (dw + db) * dim] (part 0 the dW
// sums when dw, then the dB sums when db). x, mean and rstd may be undefined when only db is asked.
void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& partial,
                         const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd);
}  // namespace cpu
namespace cuda {
void layer_norm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& w, const Tensor& b, double eps);
void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& partial,
                         const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd);
}  // namespace cuda
}  // namespace tg
