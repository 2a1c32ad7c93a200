// LoRA, as peft defines it (https://github.com/huggingface/peft), for nn::Linear layers (and, as
// peft's target_parameters, for MoE experts' 3-D weights: peft/lora_experts.h):
//   y = W x + b + (lora_alpha / r) * B (A (dropout(x))),  B [out, r] = 0 at first,
// so a freshly wrapped model computes exactly what the base model does; names are peft's without
// the adapter name (docs/api.md).
//
//   auto report = tg::peft::apply_lora(*model, {});   // q/k/v/o_proj, r 8, alpha 16
//   tg::peft::print_trainable_parameters(*model);
//   ... train model->trainable_parameters() ...
//   tg::peft::save_adapter(*model, "out/adapter", cfg);
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "io/json.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/quantized_linear.h"
#include "peft/lora_experts.h"

namespace tg::peft {

// target_modules' shorthand, as peft's: every Linear but the output head.
inline constexpr const char* kAllLinear = "all-linear";

struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 16;
  double lora_dropout = 0.0;
  // A Linear is wrapped when its name, or the last component of its path, is listed
  // (peft's matching: "q_proj" matches "model.layers.0.self_attn.q_proj"); every name must match
  // at least one module. {"all-linear"}: every Linear but the output head (peft's shorthand,
  // written to adapter_config.json as the full paths it stands for). This default is the attention
  // projections; peft's default for a family is model->architecture().lora_targets.
  std::vector<std::string> target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  // Expert weights adapted as peft's target_parameters (LoRAExperts): "<module path>.<parameter>"
  // equal to or ending with ".<entry>", e.g. {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}.
  std::vector<std::string> target_parameters = {};
  // Modules (matched the same way) left fully trainable and saved with the adapter (e.g.
  // "lm_head"): peft's modules_to_save.
  std::vector<std::string> modules_to_save = {};
  // Freeze every RMSNorm / LayerNorm weight and bias (peft does; false keeps them trainable and
  // saves them with the adapter).
  bool freeze_norms = true;
  // Mixed precision, as peft's get_peft_model(..., autocast_adapter_dtype=True) (its default):
  // the adapters of a bfloat16 layer are float32 (their gradients and AdamW state then are too);
  // false gives them the layer's dtype. Other base dtypes always keep their own. So for a bf16
  // base with float32 LoRA: model.to(kBFloat16), then apply_lora (a later model.to(kBFloat16)
  // would cast the adapters too).
  bool autocast_adapter_dtype = true;
  // Written to adapter_config.json for peft (empty: the model's name_or_path, as peft records it,
  // null without one); load_adapter checks it against the model it loads onto.
  std::string base_model_name_or_path = "";
  std::string task_type = "CAUSAL_LM";

  double scaling() const { return lora_alpha / static_cast<double>(r); }
};

// A Linear with a LoRA adapter. It takes over the wrapped layer's weight and bias tensors (the
// same handles) and freezes them. The adapters are on the layer's device, in its dtype, except
// float32 for a bfloat16 layer when autocast_adapter_dtype (see LoraConfig).
class LoRALinear : public nn::Linear {
 public:
  LoRALinear(const nn::Linear& base, int64_t r, double lora_alpha, double lora_dropout = 0.0,
             Generator& gen = default_generator(), bool autocast_adapter_dtype = true);
  Tensor forward(const Tensor& x) override;
  // {W, b} when merged, {W, b, A, B, scaling} while the adapter runs without dropout (over a
  // quantised base: its frozen weight in W's place), nullopt with dropout in training (the
  // adapters then see another x than the base layer).
  std::optional<LinearSpec> spec() const override;

  // W += scaling * B A (then forward skips the LoRA path), and back. tg::Error when already in
  // that state. With float32 adapters on a bfloat16 W the sum is computed in float32 and rounded
  // once, so unmerge restores W only to within bfloat16 rounding (as in peft).
  void merge();
  void unmerge();
  bool merged() const { return merged_; }
  // scaling * B A, [out, in], in the adapters' dtype (no autograd).
  Tensor delta_weight() const;
  // false: forward computes the base layer alone (peft's disable_adapters; see disable_adapter).
  bool adapter_enabled() const { return enabled_; }
  void set_adapter_enabled(bool enabled);

  int64_t r;
  double lora_alpha, scaling;
  std::shared_ptr<nn::Linear> lora_A;  // weight [r, in]
  std::shared_ptr<nn::Linear> lora_B;  // weight [out, r]
  std::shared_ptr<nn::Dropout> lora_dropout;
  // The quantised base (QLoRA's nn::Linear4bit, nn::LinearFp8), sharing weight and bias; null for a
  // dense one. forward is then base(x) + scaling * B(A(dropout(x))); merge refuses.
  std::shared_ptr<nn::QuantizedLinear> quantized_base;

 protected:
  std::string extra_repr() const override;

 private:
  bool merged_ = false, enabled_ = true;
};

struct LoraReport {
  std::vector<std::string> wrapped;        // module paths now LoRALinear
  std::vector<std::string> wrapped_parameters;  // expert weights adapted ("<path>.gate_up_proj")
  std::vector<std::string> saved_modules;  // modules_to_save that matched
  int64_t trainable_params = 0, all_params = 0;
  std::string str() const;
};

// Wraps every target Linear in `model` by a LoRALinear (adapters on the layer's device and dtype,
// float32 for bfloat16 layers: LoraConfig::autocast_adapter_dtype) and every MoE block whose
// expert weights target_parameters names by a LoRAExperts, freezes every other parameter except
// modules_to_save (and norms when freeze_norms is false). tg::Error when a target name matches no
// module (listing the model's Linear names), a target is not a Linear, a target_parameters entry
// names no expert weight, lora_dropout is set with target_parameters (peft refuses it), or the
// model already has LoRA.
LoraReport apply_lora(nn::Module& model, const LoraConfig& config = {}, Generator& gen = default_generator());
// target_modules with "all-linear" replaced by the paths it stands for in `model`; else as given.
std::vector<std::string> expand_target_modules(nn::Module& model, const std::vector<std::string>& target_modules);

// peft's line: "trainable params: 32,768 || all params: 889,984 || trainable%: 3.6819".
std::string trainable_parameters_line(const nn::Module& model);
void print_trainable_parameters(const nn::Module& model);  // to std::cout
void print_trainable_parameters(const nn::Module& model, std::ostream& os);

// The LoRALinear layers of a model, by path (lora_experts: its LoRAExperts).
std::vector<std::pair<std::string, LoRALinear*>> lora_layers(nn::Module& model);
// Whether the model has any LoRA: LoRALinear layers or LoRAExperts.
bool has_lora(nn::Module& model);
// merge / unmerge every LoRALinear and LoRAExperts.
void merge(nn::Module& model);
void unmerge(nn::Module& model);
// Merges and replaces every LoRALinear by a plain Linear holding the merged weight (peft's
// merge_and_unload), every LoRAExperts by the plain experts holding theirs. The weights' requires_grad is left as it was (frozen). A quantised base (4-bit,
// FP8) comes back dense: each weight dequantised to its layer's compute dtype (the adapter added in
// its own dtype and the sum rounded once), nn::QuantizedLinear layers without an adapter too, said
// once on stderr.
void merge_and_unload(nn::Module& model);

// peft's `with model.disable_adapter():`: while the guard lives every LoRALinear of the model
// computes its base layer alone, so the model is the base: the reference policy of preference
// training (DPO, KTO, GRPO's KL) without a second model. Under tg::NoGradGuard such a forward
// records nothing and keeps nothing. modules_to_save keep their trained weights (tapegrad trains
// them in place, peft a copy). Each layer's previous state comes back when the guard ends.
// tg::Error when the model has no LoRA layer or a merged one (its base weight holds the adapter).
class [[nodiscard]] AdapterDisabled {
 public:
  explicit AdapterDisabled(nn::Module& model);
  ~AdapterDisabled();
  AdapterDisabled(const AdapterDisabled&) = delete;
  AdapterDisabled& operator=(const AdapterDisabled&) = delete;

 private:
  std::vector<std::pair<LoRALinear*, bool>> previous_;
};
inline AdapterDisabled disable_adapter(nn::Module& model) { return AdapterDisabled(model); }

// <dir>/adapter_model.safetensors (keys "base_model.model.<path>.lora_A.weight", ...; an expert
// weight's under its module's path, ".base_layer" once for each adapted parameter registered after
// it, as peft nests its ParamWrappers) and
// <dir>/adapter_config.json with peft's fields; the directory is created if needed.
void save_adapter(nn::Module& model, const std::string& dir, const LoraConfig& config);
// Reads both files; checks the adapter's base against the model (adapter_base_mismatch) unless
// ignore_base_mismatch; wraps the model first (apply_lora with the saved config) unless it is
// already wrapped, then loads the adapter weights (every LoRA weight must be present, every key
// must match a parameter). Returns the saved config.
struct LoadAdapterOptions {
  bool ignore_base_mismatch = false;  // load onto another base on purpose (shapes must still fit)
};
LoraConfig load_adapter(nn::Module& model, const std::string& dir, Generator& gen = default_generator(),
                        const LoadAdapterOptions& options = {});

// "" when an adapter trained on `adapter_base` (adapter_config.json's base_model_name_or_path) fits
// the model at `model_name_or_path` with config.json `model_config`; else both named and what
// differs. Where the adapter's base is a folder here, its config.json's architecture and sizes must
// be the model's; where both names are known, they must name one folder or end alike (a hub id
// "Qwen/Qwen2.5-0.5B" and a folder ".../Qwen2.5-0.5B"). An unknown name checks nothing.
std::string adapter_base_mismatch(const std::string& adapter_base, const std::string& model_name_or_path,
                                  const json::Value& model_config);
// The same for a model (a CausalLM's name_or_path and config_json; "" for other modules).
std::string adapter_base_mismatch(const LoraConfig& adapter, const nn::Module& model);
// adapter_config.json <-> LoraConfig. fan_in_fan_out: the targets are Conv1D layers in
// transformers (GPT-2's; save_adapter decides it from the model).
std::string adapter_config_json(const LoraConfig& config, bool fan_in_fan_out = false);
LoraConfig parse_adapter_config(const std::string& json_text, const std::string& source = "adapter_config.json");

}  // namespace tg::peft
