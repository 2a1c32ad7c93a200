// TRL's pairwise preference trainers on train::Trainer's loop (its schedule, clipping,
// accumulation, logs, checkpoints that resume bit for bit): DPOTrainer, CPOTrainer (SimPO is its
// loss_type "simpo") and ORPOTrainer. A step draws pairs in the seeded order, runs their chosen
// and rejected sequences in one forward (TRL's concatenated batch), sums each completion's token
// log-probs through the fused head (no [B, T, V] logits), and for DPO takes the reference's from
// the same model with its LoRA adapters switched off under no-grad (nothing recorded or kept),
// or from a table computed once (precompute_ref_log_probs). Logged as TRL logs them:
// rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins, logps/chosen,
// logps/rejected (and nll_loss, log_odds_ratio, log_odds_chosen for CPO / ORPO).
//
//   auto pairs = tg::data::read_preference_jsonl("pairs.jsonl", tok);
//   tg::train::DPOTrainer trainer(model, pairs, {.output_dir = "out", .learning_rate = 5e-6, .max_steps = 100},
//                                 {.beta = 0.1});
//   trainer.train();
//   trainer.save_model();  // the adapter, as peft writes it
//
// docs/preference.md has the whole script and each loss.
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

class PairwiseTrainer : public Trainer {
 public:
  // The loss and the metrics over the eval pairs (given to the constructor), logged with the
  // prefix ("eval_loss", "eval_rewards/accuracies", ...); also every eval_steps while training.
  LogEntry evaluate(const std::string& metric_key_prefix = "eval");
  const data::PreferenceDataset& train_dataset() const { return train_; }

 protected:
  enum class Reference { None, InStep, Precomputed };
  // Wraps Trainer's setup: the pairs truncated (pairs whose prompt fills max_length are left out,
  // as TRL drops them), checked against the model's context, dropout disabled if asked, and
  // the reference checked (InStep) or computed (Precomputed). `name` names it in errors.
  PairwiseTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::PreferencePair> train_pairs,
                  TrainingArguments args, const data::TruncationOptions& truncation, bool disable_dropout,
                  std::span<const data::PreferencePair> eval_pairs, const char* name, Reference reference,
                  int64_t precompute_batch_size);
  virtual PreferenceLoss pair_loss(const PairLogProbs& lp) const = 0;

  StepResult run_step(int64_t step) override;
  int64_t train_rows() const override { return train_.rows(); }
  std::string describe_train_data() const override;
  DataFingerprint compute_train_fingerprint() const override;
  std::string cuda_graph_blocker() const override;
  void evaluate_in_training() override;

 private:
  struct ReferenceTable {
    std::vector<double> chosen, rejected;
  };
  Tensor batch_loss(const data::PreferenceBatch& b, const ReferenceTable& table, Metrics& metrics);
  ReferenceTable precompute(const data::PreferenceDataset& pairs, int64_t batch_size);

  const char* name_;
  Reference reference_;
  data::PreferenceDataset train_, eval_;
  ReferenceTable train_reference_, eval_reference_;
};

class DPOTrainer : public PairwiseTrainer {
 public:
  // tg::Error naming the field or what is missing: an invalid config or arguments, a pair longer
  // than the model's context, no reference (a model without LoRA layers needs
  // precompute_ref_log_probs or reference_free).
  DPOTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::PreferencePair> train_pairs,
             TrainingArguments args, DPOConfig config = {}, std::span<const data::PreferencePair> eval_pairs = {});
  const DPOConfig& config() const { return config_; }

 protected:
  PreferenceLoss pair_loss(const PairLogProbs& lp) const override { return dpo_loss(config_, lp); }
  json::Value objective_config() const override;

 private:
  DPOConfig config_;
};

class CPOTrainer : public PairwiseTrainer {
 public:
  CPOTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::PreferencePair> train_pairs,
             TrainingArguments args, CPOConfig config = {}, std::span<const data::PreferencePair> eval_pairs = {});
  const CPOConfig& config() const { return config_; }

 protected:
  PreferenceLoss pair_loss(const PairLogProbs& lp) const override { return cpo_loss(config_, lp); }
  json::Value objective_config() const override;

 private:
  CPOConfig config_;
};

class ORPOTrainer : public PairwiseTrainer {
 public:
  ORPOTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::PreferencePair> train_pairs,
              TrainingArguments args, ORPOConfig config = {}, std::span<const data::PreferencePair> eval_pairs = {});
  const ORPOConfig& config() const { return config_; }

 protected:
  PreferenceLoss pair_loss(const PairLogProbs& lp) const override { return orpo_loss(config_, lp); }
  json::Value objective_config() const override;

 private:
  ORPOConfig config_;
};

}  // namespace tg::train
