// RMSNorm over the last dim: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps), statistics in
// float32 (saved for backward). Backward is specialised on its gradient mask: a frozen weight
// (LoRA) runs the dx-only kernel, with no dw partial buffer and no dw reduction.
#pragma once

#include <utility>

#include "core/tensor.h"

namespace tg {

// w may be undefined (no scale).
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps = 1e-5);

// The Llama block step in one pass: r = x + residual; y = rms_norm(r, w, eps). Returns {y, r}.
std::pair<Tensor, Tensor> fused_add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& w,
                                             double eps = 1e-5);

}  // namespace tg
