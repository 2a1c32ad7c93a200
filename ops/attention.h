// scaled_dot_product_attention(q, k, v), as torch.nn.functional.scaled_dot_product_attention:
//   softmax(q k^T * scale  [+ causal mask]) v,   scale = 1/sqrt(head_dim) unless given.
// q [..., L, E], k [..., S, E], v [..., S, Ev]; with enable_gqa k and v may have fewer heads (dim
// -3) than q; is_causal masks key j > query i; attn_mask (bool, true: the key takes part)
// broadcasts to [..., L, S]; sinks [Hq] (gpt-oss): a learned logit per query head joining each
// row's softmax. Which kernel runs (the fused CPU one, cuDNN, the flash kernels or the
// composition), its trace and what it keeps for backward: docs/api.md.
#pragma once

#include <cstdint>
#include <optional>

#include "core/generator.h"
#include "core/tensor.h"

namespace tg {

// The longest sequence (queries or keys) attention takes on a GPU: the flash kernels' grid holds
// at most 65,535 blocks of 64 rows along the sequence.
inline constexpr int64_t kCudaAttentionMaxSeq = int64_t{65535} * 64;

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, double dropout_p = 0.0,
                                    Generator& gen = default_generator(), bool enable_gqa = false,
                                    const Tensor& attn_mask = Tensor(), const Tensor& sinks = Tensor());

// The bool [L, S] mask that is true where key j > query i, on `device`.
Tensor causal_mask(int64_t L, int64_t S, Device device = Device::cpu());

// Causal attention inside bands: packed documents (flash_attn_varlen_func, transformers' packed
// position_ids) and sliding windows. Query i sees the keys j with first(i) <= j <= i, where
//   first(i) = max(i - position_ids[..., i], i - window + 1, 0),
// so every packed document attends only to itself. position_ids [B, L] or [L] (undefined: one
// document a row), window 0: none; the rest (sinks too) as scaled_dot_product_attention's (docs/api.md).
Tensor banded_causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& position_ids,
                               int64_t window = 0, std::optional<double> scale = std::nullopt, double dropout_p = 0.0,
                               Generator& gen = default_generator(), bool enable_gqa = false,
                               const Tensor& sinks = Tensor());
// Its band as a bool mask (true: the key takes part) for L queries and S keys: [B, 1, L, S] for
// position_ids [B, L], else [L, S]; on position_ids' device (or `device` when undefined).
Tensor banded_causal_mask(const Tensor& position_ids, int64_t window, int64_t L, int64_t S,
                          Device device = Device::cpu());

}  // namespace tg
