// index_copy_: torch.Tensor.index_copy_, self[..., index[i], ...] = source[..., i, ...] along `dim`,
// in place and not differentiable. What a static KV cache writes each decode step with: the column
// is a device tensor, so the write is the same kernel at every step (a CUDA graph replays it).
//
// self contiguous; source of self's shape but index.numel() along dim (any strides; copied when not
// contiguous); index 1-D int32 / int64 on self's device, its entries distinct and in
// [0, self.shape[dim]). An entry out of range: tg::Error on the CPU; on the GPU that slice is not
// written and the error is raised by a later call (ops/cuda/index_check.cuh).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tg {

void index_copy_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);

}  // namespace tg
