// What the preference trainers (DPO, CPO, ORPO, KTO, GRPO) share: the completions' log-probs of
// the policy and of the reference, the checks that a reference is there, TRL's disable_dropout,
// and the metrics of several batches averaged.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/models/causal_lm.h"
#include "train/training_arguments.h"

namespace tg::train::detail {

// Each row's completion log-prob: its token log-probs summed where labels are not -100 ([rows],
// float32 on the model's device), differentiable.
Tensor completion_log_probs(nn::CausalLM& model, const Tensor& ids, const Tensor& labels);
// The same of the reference: the model with its LoRA adapters switched off (as it is without
// any), under no-grad: nothing recorded, nothing kept for a backward.
Tensor reference_log_probs(nn::CausalLM& model, const Tensor& ids, const Tensor& labels);

// tg::Error from `who` unless the model can give the reference in the step: LoRA layers (the
// base is the reference) and no trainable weight besides them (it would change the base).
// `instead` says what else the user can do (precompute_ref_log_probs, ...).
void check_in_step_reference(const char* who, nn::CausalLM& model, const std::string& instead);

// TRL's disable_dropout: every Dropout module's p set to 0.
void disable_dropout(nn::Module& model);

// Sums metrics of several batches and gives their means (a metric counts where it was given).
class MetricMeans {
 public:
  void add(const std::map<std::string, double>& metrics, double weight = 1.0);
  std::map<std::string, double> means() const;

 private:
  std::map<std::string, std::pair<double, double>> sums_;  // weighted sum, weight
};

// A step's micro-batches of a preference dataset (data::PreferenceDataset,
// UnpairedPreferenceDataset): gradient_accumulation_steps batches of per_device_train_batch_size
// rows in its seeded order.
template <class Dataset>
auto micro_batches(const Dataset& data, int64_t step, const TrainingArguments& args, Device device) {
  std::vector<decltype(data.rows_batch(std::span<const int64_t>(), device))> out;
  for (int64_t k = 0; k < args.gradient_accumulation_steps; ++k)
    out.push_back(data.rows_batch(data.batch_rows((step - 1) * args.gradient_accumulation_steps + k,
                                                  args.per_device_train_batch_size, static_cast<uint64_t>(args.seed)),
                                  device));
  return out;
}

// Each value of `table` at `rows`, as a float32 [rows] tensor on `device`.
Tensor gather_values(const std::vector<double>& table, std::span<const int64_t> rows, Device device);

}  // namespace tg::train::detail
