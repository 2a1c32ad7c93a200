// scaled_dot_product_attention(q, k, v), as torch.nn.functional.scaled_dot_product_attention:
//   softmax(q k^T * scale  [+ causal mask]) v,   scale = 1/sqrt(head_dim) unless given.
// q [..., L, E], k [..., S, E], v [..., S, Ev] (the same leading dims: repeat grouped kv heads
// first). is_causal masks key j > query i (the top-left aligned lower triangle, as PyTorch).
// dropout_p > 0 drops attention probabilities (training only; pass 0 in eval).
// For now a composition of matmul / masked_fill / softmax / dropout; fused kernels replace it
// later, here and only here (the trace records "sdpa.composite").
#pragma once

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
