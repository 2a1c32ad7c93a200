// Backend contract for binary ops: out is contiguous; a and b are views of out's shape whose
// broadcast dims have stride 0, of out's dtype, or both float32 for a bfloat16 out (the float32
// result rounded once: a float32 gradient scaled into a bfloat16 one without a float32 copy).
#pragma once

#include "core/tensor.h"
#include "ops/elementwise_math.h"

namespace tg {
namespace cpu {
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
}
namespace cuda {
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
}
}  // namespace tg
