// silu_mul(gate, up) = silu(gate) * up, the gated activation of a SwiGLU MLP
// (down_proj(silu(gate_proj(x)) * up_proj(x))). gate and up have one shape, floating point.
// One fused pass forward and one backward (ops/silu_mul_kernels.h; CPU float32 / float64, trace
// "silu_mul.fused_cpu"; CUDA float32 / bfloat16, "silu_mul.fused_cuda"), saving gate and up only;
// CPU bfloat16 takes the composition mul(silu(gate), up) (trace "silu_mul.composite").
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor silu_mul(const Tensor& gate, const Tensor& up);

}  // namespace tg
