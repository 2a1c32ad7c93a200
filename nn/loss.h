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

// Log-probabilities of the next tokens, as TRL's selective_log_softmax(logits[:, :-1], labels[:, 1:]):
// out[b, t] = log softmax(logits[b, t])[labels[b, t + 1]], 0 where that label is ignore_index and
// at t = T - 1 (nothing follows). [B, T], float32 (float64 for float64 logits); bfloat16 logits
// are upcast first, as above.
Tensor next_token_log_probs(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -100);
// The same from the final hidden states [B, T, H] and a bias-free head's weight [V, H], through
// linear_cross_entropy's rows (no [B, T, V] logits; a frozen head gets no dW).
Tensor next_token_log_probs_from_hidden(const Tensor& hidden, const Tensor& head_weight, const Tensor& labels,
                                        int64_t ignore_index = -100);

}  // namespace tg::nn
