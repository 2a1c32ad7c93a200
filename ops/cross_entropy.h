// cross_entropy(logits [N, V], targets [N] int32/int64): log-softmax and negative log-likelihood
// fused in one pass, as torch.nn.functional.cross_entropy. Targets equal to ignore_index add no
// loss and no gradient; Mean divides by the number of targets not ignored.
#pragma once

#include "core/tensor.h"

namespace tg {

enum class Reduction { Mean, Sum, None };

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);

}  // namespace tg
