// Backend contract for the fused scaled_dot_product_attention (ops/attention.h).
//
// Every tensor is [..., rows, cols] with a unit stride in the last dim and any other strides
// (views such as the [B, H, T, hd] transpose of a [B, T, H, hd] projection are read in place).
// q, out, dout, dq and lse share their leading dims; k, v, dk, dv may have fewer heads in dim -3
// (grouped-query attention: query head h reads kv head h / (Hq / Hkv)); dk and dv are then summed
// over the query heads of each group inside the kernel. Outputs are pre-allocated by the op. lse
// and delta are [..., L], contiguous, in the accumulation type (float32 for float32 / bfloat16,
// float64 for float64). With `causal`, query i sees keys j <= i (top-left aligned, as PyTorch's
// is_causal). mask (CPU only; undefined: none) is bool [..., L, S] over q's leading dims (any
// strides, zero ones included, except a unit last stride): false drops the key; a row with no
// key left gives out = 0, lse = -inf.
//
// first (undefined: none; only with causal) is banded_causal_attention's band (ops/attention.h):
// int32 [Bf, L], contiguous, Bf 1 (every sequence) or the batch (q's dims before the heads):
// query i of sequence b sees keys first[b, i] <= j <= i. sdpa_band writes it, non-decreasing
// along each row and at most i, which the kernels' tile skipping relies on.
//
// CPU: float32 / float64, any E and Ev. CUDA: bfloat16, 3-D or 4-D, E == Ev in {32, 64, 128},
// every row 16-byte aligned (the op copies other inputs), L and S >= 1.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace tg {
// Sinks joined after a forward that had none (the GPU kernels have none), in place: each row's
// lse' = log(exp(lse) + exp(z)) with z its head's sink, out' = out exp(lse - lse'). Exact: the
// keys' probabilities all shrink by that factor; the backward below then takes out' and lse' as
// a forward with the sinks would have left them. sinks [Hq] of any floating dtype; a composition of
// ops on out's device.
void sdpa_add_sinks(const Tensor& out, const Tensor& lse, const Tensor& sinks);

namespace cpu {
// first[b, i] = max(i - position_ids[b, i], i - window + 1, 0) over queries 0..i (window 0: none;
// position_ids int64 [Bf, L] contiguous, or undefined: 0..L-1). A position <= 0 starts a document.
void sdpa_band(const Tensor& first, const Tensor& position_ids, int64_t window);
// out = softmax(q k^T * scale [+ causal mask]) v and lse[i] = logsumexp_j(scores[i, j]) (scores
// already scaled). The [L, S] probabilities are never stored. sinks (undefined: none; q's dtype,
// [Hq], contiguous) join every row of their head as one more score: lse takes them in, out does
// not (a row with no key left then has out = 0, lse = its sink), and the backward below is unchanged.
void sdpa_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool causal, double scale, const Tensor& first = Tensor(), const Tensor& mask = Tensor(),
                  const Tensor& sinks = Tensor());
// Gradients from dout, flash-attention style (P recomputed from q, k and lse):
//   P = exp(q k^T * scale - lse),  dv = P^T dout,  dP = dout v^T,  delta = rowsum(dout * out),
//   dS = P * (dP - delta) * scale,  dq = dS k,  dk = dS^T q.
// Each of dq, dk, dv may be undefined (not wanted); v, out and delta (scratch the kernel fills)
// are used only for dq or dk and may be undefined otherwise.
void sdpa_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& delta,
                   bool causal, double scale, const Tensor& first = Tensor(), const Tensor& mask = Tensor());
// Decoding, forward only: out as sdpa_forward's for L == 1 without causal or lse (mask as
// above, undefined: none). CUDA: bfloat16 or float32, 4-D, E == Ev a power of two in [8, 256],
// rows 16-byte aligned (ops/attention.cpp checks); the keys split over blocks (flash-decoding).
void sdpa_decode(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                 const Tensor& mask);
}  // namespace cpu
namespace cuda {
void sdpa_band(const Tensor& first, const Tensor& position_ids, int64_t window);
void sdpa_decode(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                 const Tensor& mask);
void sdpa_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool causal, double scale, const Tensor& first = Tensor());
void sdpa_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& delta,
                   bool causal, double scale, const Tensor& first = Tensor());

// cuDNN's fused flash attention (ops/cuda/attention_cudnn.cu): the contract above for bfloat16
// 3-D or 4-D tensors whose head dims E and Ev are multiples of 8 up to 256 (128 before Hopper),
// rows 16-byte aligned. An execution plan is built per shape and layout (kernels compiled: tens
// of ms to a second) and kept; never during a CUDA graph capture. Each returns false, having done
// nothing, when cuDNN cannot take the call: a build without cuDNN, an older runtime than the
// graphs need, a shape it does not support, or no plan yet where none may be built (a capture
// runs, or the forward's `build` is false). The backward computes dq, dk and dv together (all
// defined, in q, k, v's layouts: ops/detail/layout.h; dout in any layout, copied to out's when it has
// another), deterministic unless tg::set_cudnn_sdp_deterministic(false); sdpa_cudnn_forward
// `with_backward` also builds (or finds) that plan, and refuses the call without it.

// The cuDNN runtime's version (cudnnGetVersion: 91900 is 9.19.0); 0 in a build without cuDNN.
size_t sdpa_cudnn_version();
bool sdpa_cudnn_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                        bool causal, double scale, bool with_backward, bool build);
// `flash_fallback`: the flash kernels' backward can take the call instead, so the deterministic
// backward declines it where even one kv head's dP would pass its workspace budget (quadratic in
// the length: 8 GiB for Llama-3.1-8B's heads at 32k tokens, 128 GiB at 128k).
bool sdpa_cudnn_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                         const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, bool causal,
                         double scale, bool flash_fallback);
}  // namespace cuda
}  // namespace tg
