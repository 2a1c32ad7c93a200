// embedding(weight [V, D], indices int32/int64 of any shape) -> [..., D]: gathers rows. Backward
// scatter-adds into dweight only when the table needs a gradient. An index outside [0, V) is a
// tg::Error: on the CPU at once, on CUDA at the next embedding or cross_entropy call on that device
// (the bad row reads zeros meanwhile). Details: docs/api.md.
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace tg
