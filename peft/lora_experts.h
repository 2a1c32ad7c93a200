// LoRA on the 3-D expert weights of a mixture-of-experts block (nn/moe.h), as peft's ParamWrapper
// (LoraConfig::target_parameters, e.g. {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}):
// expert e computes with W_e + (lora_alpha / r) B_e A_e, where peft's lora_A [r * E, in] holds A_e
// as its rows e * r .. e * r + r - 1 and lora_B [out, r * E] holds B_e as its columns e, E + e,
// 2E + e, ... (peft's einsum "o r e, e r i"); in and out are the weight's ([E, out, in] for
// Qwen3-MoE and Mixtral, gpt-oss's [E, in, out] read transposed). A ~ U(-1/sqrt(in), 1/sqrt(in)),
// B = 0, no dropout (peft refuses it there). grouped_mm runs the low-rank product of each expert
// on its own tokens: W + delta is never built, and the frozen experts get no weight gradient.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/generator.h"
#include "nn/linear.h"
#include "nn/moe.h"

namespace tg::peft {

// One adapted parameter's lora_A [r * E, in] and lora_B [out, r * E], as peft shapes them.
class ParameterAdapter : public nn::Module {
 public:
  ParameterAdapter(int64_t in, int64_t out, int64_t r, int64_t experts, Generator& gen);
  std::shared_ptr<nn::Linear> lora_A, lora_B;
};

class LoRAExperts : public nn::MoeExperts {
 public:
  // Takes over `base`'s tensors (the same handles) and adapts `parameters` (gate_up_proj and / or
  // down_proj). Adapters in the weights' dtype, float32 for bfloat16 ones when autocast_adapter_dtype.
  LoRAExperts(const nn::MoeExperts& base, const std::vector<std::string>& parameters, int64_t r, double lora_alpha,
              Generator& gen = default_generator(), bool autocast_adapter_dtype = true);
  std::optional<Update> update(const std::string& parameter) const override;
  // W_e += scaling B_e A_e for every adapted parameter (computed in the adapters' dtype, rounded
  // once to W's), and back; tg::Error when already in that state.
  void merge();
  void unmerge();
  bool merged() const { return merged_; }
  // scaling B_e A_e of `parameter` as [E, out, in] (no autograd).
  Tensor delta_weight(const std::string& parameter) const;

  std::vector<std::string> parameters;  // adapted, in registration order
  int64_t r;
  double lora_alpha, scaling;
  std::map<std::string, std::shared_ptr<ParameterAdapter>> adapters;  // registered as "lora_<parameter>"

 protected:
  std::string extra_repr() const override;

 private:
  bool merged_ = false;
};

// peft's key of parameters[i]'s adapter below its module's path: the ParamWrappers of one module
// nest in registration order, the last outermost (".base_layer" once per wrapper outside it).
std::string peft_infix(const std::vector<std::string>& parameters, size_t i);

// The LoRAExperts of a model, by path.
std::vector<std::pair<std::string, LoRAExperts*>> lora_experts(nn::Module& model);

}  // namespace tg::peft
