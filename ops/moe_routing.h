// What a mixture-of-experts layer needs to route its tokens (nn/moe.h puts them together):
//   topk(x, k): the k largest values along x's last dim, largest first (equal values: the lower
//     index first), and their int64 indices, as torch.topk(x, k, dim=-1). The values are
//     differentiable (backward puts each gradient back at its index, zeros elsewhere).
//   sort_by_expert(indices [T, k], E): the T * k choices of `indices` (int64, expert ids in [0, E))
//     grouped by expert, as torch.sort / histc do it in a dropless MoE: counts [E] (the histogram:
//     grouped_mm's group sizes), token_of_row [T * k] (the token whose row comes at each place of
//     the grouped order; stable: by expert, then in choice order) and row_of_choice [T * k] (where
//     choice t * k + j went: the inverse permutation). Every choice is kept: no token is dropped.
//     Not differentiable. An expert id outside [0, E): tg::Error on the CPU; on CUDA the choice is
//     left out of the counts and reported by a later call (ops/cuda/index_check.cuh).
// CPU: float32 / bfloat16 / float64 (trace "topk.cpu", "sort_by_expert.cpu"); CUDA: a thread per
// row for topk, one thread for the counting sort ("topk.cuda", "sort_by_expert.cuda").
#pragma once

#include <cstdint>
#include <utility>

#include "core/tensor.h"

namespace tg {

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k);

struct ExpertOrder {
  Tensor counts, token_of_row, row_of_choice;
};
ExpertOrder sort_by_expert(const Tensor& indices, int64_t num_experts);

}  // namespace tg
