// silu_mul(gate, up) = silu(gate) * up, the gated activation of a SwiGLU MLP
// (down_proj(silu(gate_proj(x)) * up_proj(x))). gate and up have one shape, floating point.
// On the CPU in float32 / float64 one fused pass forward and one backward (ops/swiglu_kernels.h,
// trace "silu_mul.fused_cpu"), saving gate and up only; elsewhere (CUDA, bfloat16) the
// composition mul(silu(gate), up) (trace "silu_mul.composite"; a fused CUDA kernel is future work).
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor silu_mul(const Tensor& gate, const Tensor& up);

}  // namespace tg
