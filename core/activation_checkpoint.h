// Activation checkpointing (torch.utils.checkpoint): trade compute for memory. The function runs
// without recording; backward runs it again with recording on (dropout draws the same masks), and
// the gradients are bitwise those without checkpoint. It must compute the same thing again, and a
// tensor with history from outside must be one of its inputs (docs/api.md).
//
//   std::vector<tg::Tensor> out = tg::checkpoint(
//       [&](const std::vector<tg::Tensor>& in) { return std::vector<tg::Tensor>{block->forward(in[0])}; },
//       {x});
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace tg {

using CheckpointFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

struct CheckpointOptions {
  // Indices of the inputs kept in host memory until backward (core/activation_offload.h), each
  // brought back while the checkpoint recorded after it runs its backward. The gradients stay
  // bitwise the same.
  std::vector<size_t> offload;
};

// fn(inputs), its activations recomputed at backward instead of kept.
std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options = {});

}  // namespace tg
