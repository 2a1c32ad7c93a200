// linear_cross_entropy(x, weight, targets) = cross_entropy(x @ weight^T, targets), fused as
// Liger-Kernel's FusedLinearCrossEntropy: the [N, V] logits never exist whole (rows go through in
// chunks; dW only when the weight requires grad). x [N, H], weight [V, H] in x's dtype, targets [N]
// int32 / int64; the loss is float32 (float64 for float64 x); Mean, Sum or None (each row's
// -log p(target), 0 for an ignored row: the log-probs of given tokens). The chunks: docs/api.md.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/cross_entropy.h"

namespace tg {

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index = -100,
                            Reduction reduction = Reduction::Mean);

}  // namespace tg
