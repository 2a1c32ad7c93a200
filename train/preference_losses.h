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
#include "train/grpo_config.h"
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

// GRPO's clipped-ratio loss over a micro-batch of completions (TRL's GRPOTrainer._compute_loss),
// on the device in the log-probs' dtype (a [B, T] tensor each): the ratio exp(logps - old_logps)
// clipped to [1 - epsilon, 1 + epsilon_high], -min(ratio A, clipped A) per token, plus beta times
// TRL's KL estimator exp(ref - logps) - (ref - logps) - 1, averaged as loss_type says.
struct GRPOLogProbs {
  Tensor logps{};       // [B, T] the policy's, differentiable (0 where mask is)
  Tensor old_logps{};   // the generating policy's (undefined: logps detached, the ratio 1)
  Tensor ref_logps{};   // the reference's (beta > 0)
  Tensor mask{};        // [B, T] 1 where a completion token is predicted, else 0
  std::vector<double> advantages{};        // [B]
  std::vector<int64_t> completion_tokens{};  // [B]: each row's mask sum
  int64_t step_tokens = 0;  // the mask sums of every micro-batch of the step (dapo's normaliser)
};
// metrics: clip_ratio/low_mean, clip_ratio/high_mean, clip_ratio/region_mean, kl (beta > 0).
PreferenceLoss grpo_loss(const GRPOConfig& config, const GRPOLogProbs& lp);

// Each completion's advantage from its reward, the generation's rewards in groups of
// num_generations consecutive completions: reward - its group's mean, divided by the std (Bessel)
// of its group or of all rewards plus 1e-4, or not ("none"), as scale_rewards says. zero_std
// counts the completions whose std is 0 (TRL's frac_reward_zero_std).
std::vector<double> grpo_advantages(const GRPOConfig& config, const std::vector<double>& rewards, int64_t& zero_std);

// log(sigmoid(x)) = x - log(1 + e^x), stable for any x (log_softmax over {x, 0}).
Tensor log_sigmoid(const Tensor& x);

}  // namespace tg::train
