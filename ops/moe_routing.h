// Routing for a mixture-of-experts layer (nn/moe.h puts them together): topk(x, k) as
// torch.topk(x, k, dim=-1); sort_by_expert(indices [T, k], E): the choices grouped by expert
// (counts, token_of_row, row_of_choice), no token dropped. Details and traces: docs/api.md.
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
