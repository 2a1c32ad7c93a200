// TRL's KTOTrainer on train::Trainer's loop: unpaired completions labelled desirable or not. A
// step draws examples in the seeded order; the policy's completion log-probs (fused head) and the
// reference's (the base with the LoRA adapters off, under no-grad; or precomputed); the KL
// estimate from the batch's mismatched rows (prompt i with completion i - 1), policy and
// reference under no-grad, mean clamped at 0; the loss of KTOConfig's loss_type. Logged as TRL:
// kl, rewards/chosen, rewards/rejected, rewards/margins, logps/chosen, logps/rejected.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/preference.h"
#include "train/preference_config.h"
#include "train/preference_losses.h"
#include "train/trainer.h"

namespace tg::train {

class KTOTrainer : public Trainer {
 public:
  // tg::Error naming what is wrong: an invalid config or arguments, a batch of one example with
  // loss_type "kto" (the KL estimate would be the example's own reward, as TRL refuses), an
  // example longer than the model's context, no reference (see DPOTrainer; the KL rows' always
  // needs the LoRA adapters, the batches pairing completions anew each step).
  KTOTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::UnpairedExample> train_examples,
             TrainingArguments args, KTOConfig config = {}, std::span<const data::UnpairedExample> eval_examples = {});

  // The loss and metrics over the eval examples, logged with the prefix.
  LogEntry evaluate(const std::string& metric_key_prefix = "eval");
  const KTOConfig& config() const { return config_; }
  const data::UnpairedPreferenceDataset& train_dataset() const { return train_; }

 protected:
  StepResult run_step(int64_t step) override;
  int64_t train_rows() const override { return train_.rows(); }
  std::string describe_train_data() const override;
  DataFingerprint compute_train_fingerprint() const override;
  json::Value objective_config() const override;
  std::string cuda_graph_blocker() const override;
  void evaluate_in_training() override;

 private:
  Tensor batch_loss(const data::UnpairedBatch& b, const std::vector<double>& table, Metrics& metrics);
  std::vector<double> precompute(const data::UnpairedPreferenceDataset& examples, int64_t batch_size);

  KTOConfig config_;
  data::UnpairedPreferenceDataset train_, eval_;
  std::vector<double> train_reference_, eval_reference_;  // precompute_ref_log_probs
};

}  // namespace tg::train
