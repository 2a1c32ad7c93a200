// scaled_dot_product_attention(q, k, v), as torch.nn.functional.scaled_dot_product_attention:
//   softmax(q k^T * scale  [+ causal mask]) v,   scale = 1/sqrt(head_dim) unless given.
// q [..., L, E], k [..., S, E], v [..., S, Ev] with the same leading dims, except that with
// enable_gqa (grouped-query attention, inputs of 3+ dims) k and v may have Hkv heads in dim -3
// where q has Hq, Hkv dividing Hq: query head h reads kv head h / (Hq / Hkv), with no copy of
// the kv heads. is_causal masks key j > query i (the top-left aligned lower triangle, as
// PyTorch). attn_mask (bool, true: the key takes part, as PyTorch's bool mask) broadcasts to
// [..., L, S] over q's leading dims; not together with is_causal (as PyTorch). A query whose
// every key is masked out gets zeros (as PyTorch's safe softmax), and no gradient flows through
// it. dropout_p > 0 drops attention probabilities (training only; pass 0 in eval).
// sinks [Hq] (gpt-oss's attention sinks): a learned logit per query head that joins each row's
// softmax as one more column and is dropped after it, so the keys' probabilities sum to less than
// one; differentiable. The CPU's fused kernel and the composition take them, the GPU kernels do
// not (there the composition serves the call).
//
// Which kernel runs (the trace names it):
//   "sdpa.fused_cpu":  CPU, float32 / float64, no dropout (with or without attn_mask).
//   "sdpa.cudnn":      CUDA, bfloat16, 3-D or 4-D, no dropout, no attn_mask, head dims E and Ev
//                      multiples of 8 up to 256 (128 before Hopper), in a build with cuDNN 9 whose
//                      runtime takes the call: cuDNN's fused flash attention (ops/cuda/
//                      attention_cudnn.cu); its backward ("sdpa.cudnn_backward") computes dq, dk
//                      and dv together, deterministic unless tg::set_cudnn_sdp_deterministic(false).
//                      An execution plan is compiled per shape (up to a second) at the first call
//                      that takes gradients, or at any call for head dims without a flash kernel;
//                      never during a CUDA graph capture (the flash kernels serve it). Off with
//                      tg::enable_cudnn_sdp(false).
//   "sdpa.flash_cuda": CUDA, bfloat16, E == Ev in {32, 64, 128}, 3-D or 4-D, no dropout, no
//                      attn_mask, where cuDNN does not serve: tensor-core flash attention
//                      (ops/cuda/attention.cu).
//   "sdpa.composite":  everything else (CUDA float32, CUDA with attn_mask, other head dims,
//                      dropout): matmul / masked_fill / softmax / dropout, with the kv heads
//                      repeated for GQA.
// The fused kernels skip the causal upper triangle and save only the output and a per-row
// logsumexp for backward, which recomputes the probabilities: the [L, S] matrix never reaches
// memory (cuDNN's deterministic backward keeps dP, [B, H, L, S] bf16, in its workspace: up to
// 1/64 of the device's memory, a larger call runs in chunks of batches or kv-head groups). The
// flash kernels' backward computes each of dq, dk, dv only when it is asked for. A 4-D call
// returns its [B, H, L, Ev] output as a view of [B, L, H, Ev] memory (as PyTorch's flash
// attention), so merging the heads back is a free reshape.
#pragma once

#include <cstdint>
#include <optional>

#include "core/generator.h"
#include "core/tensor.h"

namespace tg {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, double dropout_p = 0.0,
                                    Generator& gen = default_generator(), bool enable_gqa = false,
                                    const Tensor& attn_mask = Tensor(), const Tensor& sinks = Tensor());

// The bool [L, S] mask that is true where key j > query i, on `device`.
Tensor causal_mask(int64_t L, int64_t S, Device device = Device::cpu());

// Causal attention inside bands: packed documents (flash_attn_varlen_func, transformers' packed
// position_ids) and sliding windows. Query i sees the keys j with first(i) <= j <= i, where
//   first(i) = max(i - position_ids[..., i], i - window + 1, 0),
// taken as the largest over queries 0..i (a band never moves back along the row). A packed row's
// positions count 0, 1, 2, ... from each document's first token (DataCollatorWithFlattening's
// position_ids), so i - position_ids[i] is that token: every document attends only to itself.
// position_ids: int32 / int64, [B, L] for 4-D q [B, H, L, E], or [L] shared by every sequence;
// undefined: one document a row. window 0: no window. q, k, v, scale, dropout_p, enable_gqa and
// sinks as scaled_dot_product_attention's (3-D or 4-D). The fused kernels (CPU, CUDA flash) honour the
// band and skip the key tiles entirely outside it, as they skip the causal upper triangle;
// elsewhere the composition runs with banded_causal_mask.
Tensor banded_causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& position_ids,
                               int64_t window = 0, std::optional<double> scale = std::nullopt, double dropout_p = 0.0,
                               Generator& gen = default_generator(), bool enable_gqa = false,
                               const Tensor& sinks = Tensor());
// Its band as a bool mask (true: the key takes part) for L queries and S keys: [B, 1, L, S] for
// position_ids [B, L], else [L, S]; on position_ids' device (or `device` when undefined).
Tensor banded_causal_mask(const Tensor& position_ids, int64_t window, int64_t L, int64_t S,
                          Device device = Device::cpu());

}  // namespace tg
