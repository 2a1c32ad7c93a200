// The losses of TRL's preference trainers, from their definitions, over sequence
// log-probabilities: the sum of a completion's token log-probs (nn::CausalLM::token_log_probs
// summed over the completion) of the policy and, for DPO and KTO, of the reference. Inputs are
// [B] float tensors on any device, the policy's differentiable; the losses are a few numbers a
// batch, so they are computed in float64 on the CPU and the loss comes back as a 0-d tensor of
// the inputs' dtype on their device, its gradient flowing to the policy's log-probs.
// docs/preference.md has each formula.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/preference_config.h"

namespace tg::train {

struct PreferenceLoss {
  Tensor loss;  // 0-d: the mean over the batch (plus the NLL terms of CPO and ORPO)
  // What TRL logs of the batch, by its names: "rewards/chosen", "rewards/rejected",
  // "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected", and the
  // trainer's own ("nll_loss", "log_odds_ratio", "log_odds_chosen", "kl").
  std::map<std::string, double> metrics;
};

// The log-probs of a batch of pairs: policy (and reference) sums [B], and each completion's
// predicted tokens (IPO, SimPO and ORPO average over them; CPO and ORPO's NLL is their mean).
struct PairLogProbs {
  Tensor chosen{}, rejected{};          // the policy's
  Tensor ref_chosen{}, ref_rejected{};  // the reference's (DPO; no gradient)
  std::vector<int64_t> chosen_tokens{}, rejected_tokens{};
};

PreferenceLoss dpo_loss(const DPOConfig& config, const PairLogProbs& lp);
PreferenceLoss cpo_loss(const CPOConfig& config, const PairLogProbs& lp);
PreferenceLoss orpo_loss(const ORPOConfig& config, const PairLogProbs& lp);

// An unpaired batch: the policy's and the reference's sums [B], which rows are desirable, and
// the KL estimate (TRL's: the mean over the batch's mismatched pairs of policy minus reference
// log-probs, clamped at 0; a constant of the loss).
struct UnpairedLogProbs {
  Tensor logps{}, ref_logps{};
  std::vector<bool> desirable{};
  double kl = 0;
};
PreferenceLoss kto_loss(const KTOConfig& config, const UnpairedLogProbs& lp);

// log(sigmoid(x)) = x - log(1 + e^x), stable for any x (log_softmax over {x, 0}).
Tensor log_sigmoid(const Tensor& x);

}  // namespace tg::train
