// Language-model losses.
#pragma once

#include <cstdint>
#include "core/tensor.h"

namespace tg::nn {

// Next-token cross entropy, as transformers' causal LM loss: position t predicts labels[t + 1]
// (the shift happens here, so labels is usually the input ids), labels == ignore_index add
// nothing, the mean is over the positions that count. logits [B, T, V] (upcast to float32
// first), labels [B, T] int32/int64.
Tensor causal_lm_loss(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -100);

// The same loss from the final hidden states [B, T, H] and a bias-free head's weight [V, H],
// without the [B, T, V] logits (ops/linear_cross_entropy.h): the labels are shifted instead of
// the hidden states (the last position predicts nothing), so every row of `hidden` is read in
// place. The loss is float32 for bfloat16 hidden states, as above.
Tensor causal_lm_loss_from_hidden(const Tensor& hidden, const Tensor& head_weight, const Tensor& labels,
                                  int64_t ignore_index = -100);

}  // namespace tg::nn
