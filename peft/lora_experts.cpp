#include "peft/lora_experts.h"

#include <algorithm>
#include <sstream>

#include "core/autograd.h"
#include "core/primitives.h"
#include "nn/init.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/matmul.h"
#include "ops/shape.h"

namespace tg::peft {

ParameterAdapter::ParameterAdapter(int64_t in, int64_t out, int64_t r, int64_t experts, Generator& gen)
    : nn::Module("ParameterAdapter") {
  // nn::Linear's own init is peft's for A: kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)).
  lora_A = std::make_shared<nn::Linear>(in, r * experts, false, gen);
  lora_B = std::make_shared<nn::Linear>(r * experts, out, false, gen);
  nn::init::zeros_(lora_B->weight);
  register_module("lora_A", lora_A);
  register_module("lora_B", lora_B);
}

LoRAExperts::LoRAExperts(const nn::MoeExperts& base, const std::vector<std::string>& targets, int64_t rank,
                         double alpha, Generator& gen, bool autocast_adapter_dtype)
    : nn::MoeExperts("LoRAExperts", base), r(rank), lora_alpha(alpha), scaling(alpha / static_cast<double>(rank)) {
  TG_CHECK(rank > 0, "LoRAExperts", "r must be positive, got ", rank);
  for (const char* p : {"gate_up_proj", "down_proj"})  // registration order
    if (std::find(targets.begin(), targets.end(), p) != targets.end()) parameters.push_back(p);
  TG_CHECK(!parameters.empty() && parameters.size() == targets.size(), "LoRAExperts",
           "adapts gate_up_proj and / or down_proj, got ", targets.size(), " names of which ", parameters.size(),
           " are");
  for (Tensor* t : {&gate_up_proj, &down_proj, &gate_up_proj_bias, &down_proj_bias})
    if (t->defined()) t->requires_grad_(false);
  const DType dtype = weight_dtype();
  const DType adapter_dtype = autocast_adapter_dtype && dtype == kBFloat16 ? kFloat32 : dtype;
  for (const std::string& p : parameters) {
    const Shape s = weight_shape(p);  // [E, out, in]
    auto& slot = adapters[p];
    slot = std::make_shared<ParameterAdapter>(s[2], s[1], rank, s[0], gen);
    slot->to(adapter_dtype, weight_device());
    register_module("lora_" + p, slot);
  }
}

std::optional<nn::MoeExperts::Update> LoRAExperts::update(const std::string& parameter) const {
  auto it = adapters.find(parameter);
  if (merged_ || it == adapters.end()) return std::nullopt;
  const Shape s = weight_shape(parameter);
  const int64_t E = s[0], out = s[1], in = s[2];
  const Tensor A = reshape(it->second->lora_A->weight, {E, r, in});
  const Tensor B = contiguous(permute(reshape(it->second->lora_B->weight, {out, r, E}), {2, 0, 1}));
  return Update{A, B, scaling};
}

Tensor LoRAExperts::delta_weight(const std::string& parameter) const {
  NoGradGuard g;
  const Update u = *LoRAExperts::update(parameter);
  return mul(matmul(u.lora_B, u.lora_A), u.scaling);
}

void LoRAExperts::merge() {
  TG_CHECK(!merged_, "LoRAExperts::merge", "the adapters are already merged");
  TG_CHECK(!quantized(), "LoRAExperts::merge", "the experts are in 4 bits: merge_and_unload dequantises them first");
  NoGradGuard g;
  for (const std::string& p : parameters) {
    const Tensor delta = delta_weight(p), w = weight(p);
    copy_(w, add(tg::to(w, delta.dtype()), delta));
  }
  merged_ = true;
}

void LoRAExperts::unmerge() {
  TG_CHECK(merged_, "LoRAExperts::unmerge", "the adapters are not merged");
  merged_ = false;
  NoGradGuard g;
  for (const std::string& p : parameters) {
    const Tensor delta = delta_weight(p), w = weight(p);
    copy_(w, sub(tg::to(w, delta.dtype()), delta));
  }
}

std::string peft_infix(const std::vector<std::string>& parameters, size_t i) {
  std::string infix;
  for (size_t j = i + 1; j < parameters.size(); ++j) infix += ".base_layer";
  return infix;
}

std::string LoRAExperts::extra_repr() const {
  std::ostringstream os;
  os << nn::MoeExperts::extra_repr() << ", r=" << r << ", lora_alpha=" << lora_alpha << ", target_parameters=";
  for (size_t i = 0; i < parameters.size(); ++i) os << (i ? "+" : "") << parameters[i];
  if (merged_) os << ", merged";
  return os.str();
}

std::vector<std::pair<std::string, LoRAExperts*>> lora_experts(nn::Module& model) {
  std::vector<std::pair<std::string, LoRAExperts*>> out;
  for (auto& [path, m] : model.named_modules())
    if (auto* l = dynamic_cast<LoRAExperts*>(m)) out.emplace_back(path, l);
  return out;
}

}  // namespace tg::peft
