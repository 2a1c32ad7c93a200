// LayerNorm over the last dim: y = (x - mean) * rstd * w + b, statistics in float32 (saved for
// backward). w and b are optional. Backward is specialised on its gradient mask: frozen w/b run
// no dw/db accumulation, allocate no partial buffers and launch no reduction.
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5);

}  // namespace tg
