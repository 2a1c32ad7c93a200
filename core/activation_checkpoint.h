// Activation checkpointing (torch.utils.checkpoint): trade compute for memory.
//
//   std::vector<tg::Tensor> out = tg::checkpoint(
//       [&](const std::vector<tg::Tensor>& in) { return std::vector<tg::Tensor>{block->forward(in[0])}; },
//       {x});
//
// The function runs without recording, so none of its activations are kept; one node records
// its inputs and the tensors requiring grad it used (the parameters, found as it runs). At
// backward that node runs the function again with recording on, over detached copies of the
// inputs and with the generators it drew from rewound (dropout draws the same masks), and
// back-propagates through the recomputed graph: the inputs' and parameters' gradients are bitwise
// those of running the function without checkpoint (same kernels, same masks, same order), and
// parameters' .grad accumulate as usual. backward(inputs=...) and retain_graph work as without.
//
// The function must compute the same thing again at backward: a module switched between train
// and eval in between is caught (other draws, other shapes), other changes are not. Tensors it
// uses that require grad must be its inputs or leaves (parameters); a tensor with history from
// outside is an error (pass it as an input). An input or parameter the outputs turn out not to
// depend on gets a zero gradient (without checkpoint: none). Without grad mode the function
// simply runs.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace tg {

using CheckpointFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// fn(inputs), its activations recomputed at backward instead of kept.
std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs);

}  // namespace tg
