// linear_cross_entropy(x, weight, targets) = cross_entropy(x @ weight^T, targets), fused as
// Liger-Kernel's FusedLinearCrossEntropy: the [N, V] logits never exist whole. Rows go through in
// chunks (2048 rows, or 256 MiB of logits if less; with dW 4096 rows, since each chunk reads and
// writes its float32 accumulator): the chunk's logits (a GEMM in x's dtype, float32
// accumulation: what autocast's matmul followed by .float() gives), its cross entropy and, when
// a gradient can be asked for, at once its dlogits (in the same buffer) and their products
// dx = dlogits W and dW += dlogits^T x (float32). Backward only scales those by the incoming
// gradient (and 1 / count for Mean). dW is computed only when the weight requires grad (a frozen
// head in LoRA costs no dW GEMM); the trace names the variant. x [N, H], weight [V, H] in x's
// dtype, targets [N] int32 / int64; ignore_index rows add no loss and no gradient. The loss is
// float32 (float64 for float64 x).
// Reduction::None returns each row's loss [N] (-log p(target), 0 for an ignored row): the
// log-probabilities of given tokens through the head, as preference losses need them. Its dx is
// the unit one scaled row by row; with a trainable weight the gradients wait for backward, which
// computes the chunks' logits again (dW needs each row's incoming gradient).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/cross_entropy.h"

namespace tg {

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index = -100,
                            Reduction reduction = Reduction::Mean);

}  // namespace tg
