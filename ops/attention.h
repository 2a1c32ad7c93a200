// scaled_dot_product_attention(q, k, v), as torch.nn.functional.scaled_dot_product_attention:
//   softmax(q k^T * scale  [+ causal mask]) v,   scale = 1/sqrt(head_dim) unless given.
// q [..., L, E], k [..., S, E], v [..., S, Ev] (the same leading dims: repeat grouped kv heads
// first). is_causal masks key j > query i (the top-left aligned lower triangle, as PyTorch).
// dropout_p > 0 drops attention probabilities (training only; pass 0 in eval).
// On the CPU in float32 / float64 without dropout, a fused kernel (ops/attention_kernels.h,
// trace "sdpa.fused_cpu"): causal attention skips the masked upper triangle, and only the output
// and a per-row logsumexp are saved for backward, which recomputes the probabilities; the
// [L, S] matrix never reaches memory. A 4-D call returns its [B, H, L, Ev] output as a view of
// [B, L, H, Ev] memory (as PyTorch's CPU flash attention does), so merging the heads back is a
// free reshape. Everywhere else (CUDA, bfloat16, dropout) it is a composition of matmul /
// masked_fill / softmax / dropout (trace "sdpa.composite"); a fused CUDA kernel is future work.
#pragma once

#include <cstdint>
#include <optional>

#include "core/generator.h"
#include "core/tensor.h"

namespace tg {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, double dropout_p = 0.0,
                                    Generator& gen = default_generator());

// The bool [L, S] mask that is true where key j > query i, on `device`.
Tensor causal_mask(int64_t L, int64_t S, Device device = Device::cpu());

}  // namespace tg
