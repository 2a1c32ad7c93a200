#include "nn/causal_lm.h"

#include "nn/loss.h"

namespace tg::nn {

Tensor CausalLM::loss(const Tensor& ids, const Tensor& labels) {
  if (!lm_head->is_plain() || lm_head->bias.defined()) return causal_lm_loss(forward(ids), labels);
  return causal_lm_loss_from_hidden(hidden_states(ids), lm_head->weight, labels);
}

}  // namespace tg::nn
