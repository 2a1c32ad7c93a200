#include "train/detail/preference_step.h"

#include <set>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/dropout.h"
#include "ops/reduce.h"
#include "peft/lora.h"

namespace tg::train::detail {

Tensor completion_log_probs(nn::CausalLM& model, const Tensor& ids, const Tensor& labels) {
  return sum(model.token_log_probs(ids, labels), {1});
}

Tensor reference_log_probs(nn::CausalLM& model, const Tensor& ids, const Tensor& labels) {
  NoGradGuard no_grad;
  if (peft::lora_layers(model).empty()) return completion_log_probs(model, ids, labels);
  peft::AdapterDisabled base(model);
  return completion_log_probs(model, ids, labels);
}

void check_in_step_reference(const char* who, nn::CausalLM& model, const std::string& instead) {
  const auto layers = peft::lora_layers(model);
  TG_CHECK(!layers.empty(), who, "the reference is the base with the LoRA adapters switched off, but the model has no "
           "LoRA layer (", instead, ")");
  std::set<std::string> adapters;
  for (const auto& [path, l] : layers) adapters.insert({path + ".lora_A.weight", path + ".lora_B.weight"});
  for (const auto& [name, p] : model.named_trainable_parameters())
    TG_CHECK(adapters.count(name), who, "the trainable weight '", name, "' is not a LoRA adapter: switching the ",
             "adapters off would not give the base as reference (", instead, ")");
}

void disable_dropout(nn::Module& model) {
  for (auto& [path, m] : model.named_modules())
    if (auto* d = dynamic_cast<nn::Dropout*>(m)) d->p = 0.0;
}

void MetricMeans::add(const std::map<std::string, double>& metrics, double weight) {
  for (const auto& [name, v] : metrics) sums_[name].first += v * weight, sums_[name].second += weight;
}

std::map<std::string, double> MetricMeans::means() const {
  std::map<std::string, double> out;
  for (const auto& [name, s] : sums_) out[name] = s.first / s.second;
  return out;
}

Tensor gather_values(const std::vector<double>& table, std::span<const int64_t> rows, Device device) {
  std::vector<float> v;
  for (int64_t r : rows) v.push_back(static_cast<float>(table.at(static_cast<size_t>(r))));
  return from_vector(v, {static_cast<int64_t>(v.size())}, device);
}

}  // namespace tg::train::detail
