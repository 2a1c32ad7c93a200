// clamped_swiglu(gate_up, alpha, limit): gpt-oss's expert activation over interleaved gate / up
// columns (gate_up [..., 2I]: gate at even columns, up at odd) -> [..., I]:
//   g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha * g),
// as transformers' GptOssExperts. A clamped value gets no gradient (torch.clamp's). One fused pass
// forward and one backward (ops/clamped_swiglu_kernels.h; every floating dtype on the CPU, float32
// / bfloat16 on CUDA, computed in float32 or wider), saving gate_up only.
#pragma once

#include "core/tensor.h"

namespace tg {

Tensor clamped_swiglu(const Tensor& gate_up, double alpha, double limit);

}  // namespace tg
