// Tensors moved to share one allocation, for nn::place_weights_adjacent and Module::to (internal).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tg::nn::detail {

// Points `t` (and so every handle to it) at `value`'s data, keeping its autograd identity: the
// same leaf, requires_grad unchanged. This is torch's `param.data = value`.
void set_data(const Tensor& t, const Tensor& value);

// The tensors (contiguous, of one dtype and device) as consecutive views of one new allocation, in
// order, their values copied in (left uninitialised when copy_values is false).
std::vector<Tensor> adjacent_copies(const std::vector<Tensor>& tensors, bool copy_values = true);

}  // namespace tg::nn::detail
