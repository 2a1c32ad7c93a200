// Backend contract for cross_entropy. logits [N, V] have a unit column stride (any row stride);
// targets [N] are contiguous int32 or int64. "acc" tensors are float32 (float64 for float64
// logits): per-row results stay in the accumulation type so Mean/Sum lose nothing to bfloat16.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tg {

// The ops' check of CPU targets before any kernel runs (CUDA kernels report theirs through the
// index-error flag, see ops/cuda/index_check.cuh): tg::Error naming `op` and the first bad row.
void check_targets_on_host(const char* op, const Tensor& targets, int64_t classes, int64_t ignore_index);

namespace cpu {
// Per row i with target t: lse[i] = logsumexp(logits[i]) and loss_rows[i] = lse[i] - logits[i, t];
// loss_rows[i] = 0 where t == ignore_index and nan where t is outside [0, V) (the op rejects
// those on the CPU before calling). Both [N], acc.
void cross_entropy(const Tensor& loss_rows, const Tensor& lse, const Tensor& logits,
                   const Tensor& targets, int64_t ignore_index);
// out (0-d, logits' dtype) = sum(loss_rows), divided by the number of targets != ignore_index
// when `mean`; count (0-d acc, or undefined) receives that number for backward.
void cross_entropy_reduce(const Tensor& out, const Tensor& count, const Tensor& loss_rows,
                          const Tensor& targets, int64_t ignore_index, bool mean);
// dlogits[i, j] = g_i * (exp(logits[i, j] - lse[i]) - [j == t_i]), a zero row where t_i is
// ignored or out of range. g_i = grad[i] when grad is [N] (Reduction::None), else the 0-d grad,
// divided by count when count is defined (Reduction::Mean). dlogits is contiguous; it may be
// logits itself (in place: linear_cross_entropy's chunks).
void cross_entropy_backward(const Tensor& dlogits, const Tensor& grad, const Tensor& lse,
                            const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                            const Tensor& count);
// cross_entropy, then in place of the (contiguous) logits their gradient for a unit gradient of
// each row's loss (cross_entropy_backward with grad 1, no count), in one pass over the rows on
// CUDA: linear_cross_entropy's chunks.
void cross_entropy_with_grad(const Tensor& loss_rows, const Tensor& lse, const Tensor& logits,
                             const Tensor& targets, int64_t ignore_index);
}  // namespace cpu
namespace cuda {
void cross_entropy_with_grad(const Tensor& loss_rows, const Tensor& lse, const Tensor& logits,
                             const Tensor& targets, int64_t ignore_index);
void cross_entropy(const Tensor& loss_rows, const Tensor& lse, const Tensor& logits,
                   const Tensor& targets, int64_t ignore_index);
void cross_entropy_reduce(const Tensor& out, const Tensor& count, const Tensor& loss_rows,
                          const Tensor& targets, int64_t ignore_index, bool mean);
void cross_entropy_backward(const Tensor& dlogits, const Tensor& grad, const Tensor& lse,
                            const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                            const Tensor& count);
}  // namespace cuda
}  // namespace tg
