// Rotary position embedding, Hugging Face's "rotate half" convention:
//   apply_rotary(x, cos, sin) = x * cos + rotate_half(x) * sin,
//   rotate_half(u) = cat(-u[..., hd/2:], u[..., :hd/2])
// x [B, H, T, hd]; cos, sin [T, hd], or per sequence [B, 1, T, hd]; cast to x's dtype. Kernels and
// traces: docs/api.md.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg {

Tensor rotate_half(const Tensor& x);
Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin);

// transformers' apply_rotary_pos_emb: {apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)},
// bitwise, as one autograd node (one CUDA launch forward and one backward, computing dq, dk or both
// as the gradient asks). q [B, H, T, hd] and k [B, Hkv, T, hd] (GQA: other head counts, or any
// leading dims of the same T and hd) of one dtype and device, views of one buffer included; cos
// and sin as apply_rotary's. Where apply_rotary is not fused (CPU bfloat16, tables that require
// grad) it is those two calls (trace "apply_rotary_pos_emb.unfused"); else traces
// "apply_rotary_pos_emb.fused_cpu" / "fused_cuda" and their "_backward".
std::pair<Tensor, Tensor> apply_rotary_pos_emb(const Tensor& q, const Tensor& k, const Tensor& cos, const Tensor& sin);

// The [T, head_dim] cos and sin tables for positions 0..T-1, float32, computed the way
// transformers does in float32: inv_freq = 1 / theta^(2i/hd), angle = t * inv_freq,
// emb = cat(angle, angle).
std::pair<Tensor, Tensor> rotary_cos_sin(int64_t T, int64_t head_dim, double theta = 10000.0,
                                         Device device = Device::cpu());
// The same tables from given frequencies (head_dim / 2 of them: scaled RoPE, nn/rotary.h).
std::pair<Tensor, Tensor> rotary_cos_sin(int64_t T, const std::vector<float>& inv_freq, Device device = Device::cpu());
// inv_freq[i] = 1 / theta^(2i/hd) in float32, as transformers computes it.
std::vector<float> rotary_inv_freq(int64_t head_dim, double theta);

}  // namespace tg
