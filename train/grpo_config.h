// The settings of a train::GRPOTrainer, named and defaulted as TRL's GRPOConfig (beside
// transformers' TrainingArguments, the train::TrainingArguments the trainer also takes; there
// per_device_train_batch_size counts completions, as in TRL, and a step's completions,
// per_device_train_batch_size x gradient_accumulation_steps, are num_generations for each of its
// prompts). docs/preference.md tells what each loss_type computes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/json.h"

namespace tg::train {

struct GRPOConfig {
  int64_t num_generations = 8;          // completions sampled for each prompt: a group
  int64_t max_completion_length = 512;  // new tokens at most
  // Sampling (nn::GenerationConfig); the log-probs of the loss take the logits over temperature too.
  double temperature = 1.0, top_p = 1.0, repetition_penalty = 1.0;
  int64_t top_k = 0;  // 0: no top-k
  double beta = 0.0;  // weight of the KL to the reference (the base, adapters off); 0: no reference pass
  int64_t num_iterations = 1;  // optimizer steps on each generation (the ratio's old policy is the generating one)
  double epsilon = 0.2;        // the ratio clipped to [1 - epsilon, 1 + epsilon_high]
  double epsilon_high = 0;     // 0: epsilon (DAPO's clip-higher: e.g. 0.28)
  // Advantages: (reward - the group's mean) / (std + 1e-4), the std of the group ("group"), of the
  // whole generation ("batch"), or not divided ("none", Dr. GRPO).
  std::string scale_rewards = "group";
  // How per-token losses are averaged: "grpo" (each completion's mean, then their mean), "bnpo"
  // (over the micro-batch's tokens), "dr_grpo" (over micro-batch x max_completion_length), "dapo"
  // (over the step's tokens).
  std::string loss_type = "dapo";
  bool mask_truncated_completions = false;  // completions without EOS learn nothing
  std::vector<double> reward_weights = {};  // one per reward function; empty: 1 each

  void validate() const;  // tg::Error naming the field
  json::Value to_json() const;
};

}  // namespace tg::train
