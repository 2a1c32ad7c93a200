// The settings of the preference trainers, named and defaulted as TRL's DPOConfig, CPOConfig,
// ORPOConfig and KTOConfig (the fields beside transformers' TrainingArguments: here those are
// the train::TrainingArguments each trainer also takes; TRL's own defaults for them are
// learning_rate 1e-6 and logging_steps 10). docs/preference.md tells what each loss computes.
//
//   tg::train::DPOConfig dpo{.beta = 0.1, .loss_type = {"sigmoid"}, .max_length = 512};
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/preference.h"
#include "io/json.h"

namespace tg::train {

struct DPOConfig {
  double beta = 0.1;  // how far from the reference (IPO: its regularisation tau)
  // Summed with loss_weights (1 each when empty): "sigmoid" (DPO), "hinge" (SLiC), "ipo" (on
  // token-averaged scores), "robust" (rDPO, label_smoothing the chance a label is flipped).
  std::vector<std::string> loss_type = {"sigmoid"};
  std::vector<double> loss_weights = {};
  // sigmoid: conservative DPO (TRL before 0.28), the preference trusted with 1 - label_smoothing;
  // robust: in [0, 0.5).
  double label_smoothing = 0.0;
  // TRL before 0.28: the reference gives every completion the same probability (log-prob 0).
  bool reference_free = false;
  // The reference's log-probs of every pair computed once when the trainer is made (a full
  // fine-tune's reference is then the model as given), in batches of precompute_ref_batch_size
  // (0: per_device_train_batch_size, per_device_eval_batch_size for the eval pairs).
  bool precompute_ref_log_probs = false;
  int64_t precompute_ref_batch_size = 0;
  // data::TruncationOptions' fields
  int64_t max_length = 1024;
  std::string truncation_mode = "keep_start";
  int64_t max_prompt_length = 0, max_completion_length = 0;
  bool disable_dropout = true;  // every Dropout's p set to 0 (LoRA's too)

  void validate() const;  // tg::Error naming the field
  json::Value to_json() const;
};

// CPO and SimPO (TRL's CPOTrainer): no reference. SimPO is loss_type "simpo" with cpo_alpha 0.
struct CPOConfig {
  double beta = 0.1;
  // "sigmoid", "hinge", "ipo" (averaged log-probs), "simpo" (averaged, margin simpo_gamma)
  std::string loss_type = "sigmoid";
  double label_smoothing = 0.0;  // sigmoid and simpo: conservative, as DPO's
  double cpo_alpha = 1.0;        // weight of the chosen completions' NLL
  double simpo_gamma = 0.5;      // simpo's target reward margin
  int64_t max_length = 1024;
  std::string truncation_mode = "keep_start";
  int64_t max_prompt_length = 0, max_completion_length = 0;
  bool disable_dropout = true;

  void validate() const;
  json::Value to_json() const;
};

// ORPO (TRL's ORPOTrainer): the chosen NLL minus beta times the log-sigmoid of the log odds
// ratio of the averaged log-probs; no reference.
struct ORPOConfig {
  double beta = 0.1;
  int64_t max_length = 1024;
  std::string truncation_mode = "keep_start";
  int64_t max_prompt_length = 0, max_completion_length = 0;
  bool disable_dropout = true;

  void validate() const;
  json::Value to_json() const;
};

// KTO (TRL's KTOTrainer): unpaired completions labelled desirable or not, against the reference
// and the batch's KL estimate.
struct KTOConfig {
  double beta = 0.1;
  std::string loss_type = "kto";  // or "apo_zero_unpaired" (no KL term)
  double desirable_weight = 1.0, undesirable_weight = 1.0;
  bool precompute_ref_log_probs = false;
  int64_t precompute_ref_batch_size = 0;
  int64_t max_length = 1024;
  std::string truncation_mode = "keep_start";
  int64_t max_prompt_length = 0, max_completion_length = 0;
  bool disable_dropout = true;

  void validate() const;
  json::Value to_json() const;
};

// A config's truncation fields as the datasets take them.
template <class Config>
data::TruncationOptions truncation_of(const Config& c) {
  return {.max_length = c.max_length, .truncation_mode = c.truncation_mode, .max_prompt_length = c.max_prompt_length,
          .max_completion_length = c.max_completion_length};
}

}  // namespace tg::train
