// softmax and log_softmax over one dim, computed in float32 (float64 for float64 inputs) with
// the row max subtracted first.
#pragma once

#include <cstdint>
#include "core/tensor.h"

namespace tg {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace tg
