// Gradient clipping, as torch.nn.utils.clip_grad_norm_.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tg::optim {

// Scales every defined grad of `params` in place by min(1, max_norm / (total + 1e-6)), where
// total is the L2 norm of all the grads together (as if concatenated). Returns total as a
// 0-d float tensor on the grads' device (no host sync; call .item() to read it). Parameters
// without a grad are skipped; none at all gives 0.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace tg::optim
