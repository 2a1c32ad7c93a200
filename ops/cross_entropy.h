// cross_entropy(logits [N, V], targets [N] int32/int64): log-softmax and negative log-likelihood
// fused in one pass, as torch.nn.functional.cross_entropy. Targets equal to ignore_index add no
// loss and no gradient; Mean divides by the number of targets not ignored, so when every target
// is ignored Mean is nan (0 / 0, as in PyTorch; the gradient is zero), Sum 0.
// Backward keeps the logits and one logsumexp per row (float32; float64 for float64 logits),
// never the N x V softmax. A target outside [0, V) other than ignore_index is an error: at once
// on the CPU; on CUDA the loss of that row is nan and the next cross_entropy or embedding call
// on the device throws (see ops/cuda/index_check.cuh: the GPU is not waited for inside an op).
#pragma once

#include <cstdint>
#include "core/tensor.h"

namespace tg {

enum class Reduction { Mean, Sum, None };

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);

}  // namespace tg
