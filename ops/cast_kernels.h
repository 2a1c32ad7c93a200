// Backend contract for to_packed (ops/cast.h): out is contiguous, of xs' total element count in
// its dtype; xs are contiguous, of one dtype, on out's device, at most kMaxPacked. xs[i] lands at
// the offset of the elements before it.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tg {
inline constexpr size_t kMaxPacked = 16;
namespace cpu {
void convert_packed(const Tensor& out, const std::vector<Tensor>& xs);
}  // namespace cpu
namespace cuda {
void convert_packed(const Tensor& out, const std::vector<Tensor>& xs);
}  // namespace cuda
}  // namespace tg
