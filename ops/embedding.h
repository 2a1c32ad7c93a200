// embedding(weight [V, D], indices int32/int64 of any shape) -> [..., D]: gathers rows.
// Backward scatter-adds into dweight only when the table needs a gradient (a frozen embedding
// costs nothing in backward). An index outside [0, V) is an error.
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace tg
