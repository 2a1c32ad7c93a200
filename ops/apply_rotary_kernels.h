// Backend contract for the fused rotary embedding (ops/apply_rotary.h).
//
// x, out, g, dx are [..., T, hd] with a unit stride in the last dim and any other strides; cos
// and sin are contiguous [T, hd] or [B, 1, T, hd] (a table per sequence: x's leading matrices
// m = b * H + h read table b) of x's dtype (CPU: float32 or float64, CUDA: float32 or bfloat16,
// computed in float32). h = hd / 2.
#pragma once

#include "core/tensor.h"

namespace tg {
namespace cpu {

// out[.., t, i] = x[t, i] cos[t, i] + r[t, i] sin[t, i],  r[i] = -x[i + h] (i < h), x[i - h] (i >= h).
// Reads x once and writes out once (cos and sin stay in cache).
void apply_rotary_forward(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin);

// The adjoint: dx[.., t, j] = g[j] cos[j] + (j < h ? g[j + h] sin[j + h] : -g[j - h] sin[j - h]).
// Reads g once and writes dx once; x itself is not needed.
void apply_rotary_backward(const Tensor& dx, const Tensor& g, const Tensor& cos, const Tensor& sin);

// apply_rotary_pos_emb: the two above for q and k with the same tables (each [..., T, hd], any
// leading dims; a per-sequence table's b is each tensor's first dim). Either tensor of a pair may
// be undefined: that side is not computed. The CPU runs the single kernels in turn; CUDA one launch.
void apply_rotary_pair_forward(const Tensor& out_q, const Tensor& out_k, const Tensor& q, const Tensor& k,
                               const Tensor& cos, const Tensor& sin);
void apply_rotary_pair_backward(const Tensor& dq, const Tensor& dk, const Tensor& gq, const Tensor& gk,
                                const Tensor& cos, const Tensor& sin);

}  // namespace cpu
namespace cuda {
void apply_rotary_forward(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin);
void apply_rotary_backward(const Tensor& dx, const Tensor& g, const Tensor& cos, const Tensor& sin);
void apply_rotary_pair_forward(const Tensor& out_q, const Tensor& out_k, const Tensor& q, const Tensor& k,
                               const Tensor& cos, const Tensor& sin);
void apply_rotary_pair_backward(const Tensor& dq, const Tensor& dk, const Tensor& gq, const Tensor& gk,
                                const Tensor& cos, const Tensor& sin);
}  // namespace cuda
}  // namespace tg
