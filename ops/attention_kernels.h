// Backend contract for the fused scaled_dot_product_attention (ops/attention.h). CPU only for
// now: on CUDA the op keeps its composition of matmul / masked_fill / softmax (a fused CUDA
// kernel is future work and would add the same two functions in tg::cuda).
//
// Every tensor is [..., rows, cols] with the same leading dims (batch * heads, flattened by the
// kernel), a unit stride in the last dim and any other strides (views such as the [B, H, T, hd]
// transpose of a [B, T, H, hd] projection are read in place). Outputs are pre-allocated by the
// op; dtype float32 or float64. lse is [..., L], contiguous, in the accumulation type (float32
// for float32, float64 for float64). With `causal`, query i sees keys j <= i (top-left aligned,
// as PyTorch's is_causal).
#pragma once

#include "core/tensor.h"

namespace tg::cpu {

// out = softmax(q k^T * scale [+ causal mask]) v and lse[i] = logsumexp_j(scores[i, j]):
// q [.., L, E], k [.., S, E], v [.., S, Ev], out [.., L, Ev]. The [L, S] probabilities are never
// stored (only a query block's rows at a time), so this saves only out and lse for backward.
void sdpa_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool causal, double scale);

// Gradients from dout [.., L, Ev] (flash-attention style: P is recomputed from q, k and lse):
//   P = exp(q k^T * scale - lse),  dv = P^T dout,  dP = dout v^T,
//   dS = P * (dP - rowsum(dout * out)) * scale,  dq = dS k,  dk = dS^T q.
// Each of dq, dk, dv may be undefined (not wanted); v and out are read only for dq or dk.
void sdpa_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, bool causal, double scale);

}  // namespace tg::cpu
