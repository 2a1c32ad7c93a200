// masked_fill(x, mask, value): x where mask is false, value where it is true. mask is bool (or
// an integer type, non-zero = true) and broadcasts to x's shape (e.g. a [T, T] causal mask).
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace tg
