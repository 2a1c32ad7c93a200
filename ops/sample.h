// Drawing one token per row of logits on the logits' own device, so a sampled decode step sends
// B ids to the host instead of B x vocab scores.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tg {

// One index per row of logits [B, V] (float32 or bfloat16), drawn from softmax(logits /
// temperature) by the Gumbel-max trick: argmax_j logits[b, j] / temperature + g(b, j), g the
// Gumbel noise of Philox (seed, counter first_row + b, stream 1 + j / 4) (ops/sample_kernels.h), the
// lowest index on a tie. Returns int64 [B] on the logits' device: kSampleNan for a row holding a
// NaN, kSampleNotFinite for a row whose best score is not finite (the caller names the error).
constexpr int64_t kSampleNan = -1, kSampleNotFinite = -2;
Tensor sample_categorical(const Tensor& logits, double temperature, uint64_t seed, uint64_t first_row);

}  // namespace tg
