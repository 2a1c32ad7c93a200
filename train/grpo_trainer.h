// TRL's GRPOTrainer on train::Trainer's loop. Every num_iterations steps a generation: the step's
// prompts (per_device_train_batch_size x gradient_accumulation_steps / num_generations, in the
// seeded order) each continued num_generations times by nn::generate from the current adapters
// (one batch, sampled, the adapters not merged), every completion scored by the reward functions
// (their weighted sum), advantages normalised within each prompt's group (scale_rewards), and, when
// needed, the generating policy's token log-probs (num_iterations > 1) and the reference's (beta >
// 0: the base with the adapters off, under no-grad). Each step then takes the clipped-ratio loss
// of GRPOConfig's loss_type over the completions' tokens, in micro-batches of
// per_device_train_batch_size completions. Logged as TRL: reward, reward_std,
// frac_reward_zero_std, rewards/<name>/mean and /std, completions/mean_length, /min_length,
// /max_length, /clipped_ratio, kl (beta > 0), clip_ratio/low_mean, /high_mean, /region_mean; and
// the step's time split: generation_seconds, training_seconds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/preference.h"
#include "data/tokenizer.h"
#include "train/grpo_config.h"
#include "train/grpo_rewards.h"
#include "train/trainer.h"

namespace tg::train {

class GRPOTrainer : public Trainer {
 public:
  // tg::Error naming what is wrong: an invalid config or arguments, no reward function (or
  // reward_weights not one for each), a step's completions not a multiple of num_generations, a
  // prompt that with max_completion_length passes the model's context, a tokenizer without EOS,
  // beta > 0 without LoRA layers (the reference is the base).
  GRPOTrainer(std::shared_ptr<nn::CausalLM> model, const data::Tokenizer& tokenizer,
              std::vector<data::PromptExample> prompts, std::vector<RewardFunction> reward_funcs,
              TrainingArguments args, GRPOConfig config = {});
  ~GRPOTrainer() override;
  const GRPOConfig& config() const { return config_; }

 protected:
  StepResult run_step(int64_t step) override;
  // Completions an epoch: prompts x num_generations (per_device_train_batch_size counts completions).
  int64_t train_rows() const override;
  std::string describe_train_data() const override;
  DataFingerprint compute_train_fingerprint() const override;
  json::Value objective_config() const override;
  std::string cuda_graph_blocker() const override;
  void evaluate_in_training() override {}

 private:
  struct Rollout;
  std::unique_ptr<Rollout> generate_and_score(int64_t generation);
  Tensor micro_batch_loss(const Rollout& rollout, size_t k, Metrics& metrics);

  data::Tokenizer tokenizer_;
  std::vector<data::PromptExample> prompts_;
  std::vector<RewardFunction> rewards_;
  GRPOConfig config_;
  data::ShuffledOrder order_;
  std::unique_ptr<Rollout> rollout_;  // the current generation's
};

}  // namespace tg::train
