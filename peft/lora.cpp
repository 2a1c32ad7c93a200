#include "peft/lora.h"

#include <climits>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/primitives.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/init.h"
#include "nn/models/causal_lm.h"
#include "nn/models/pretrained.h"
#include "nn/norm.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/lora_linear.h"
#include "ops/matmul.h"

namespace tg::peft {
namespace {

const std::string kPrefix = "base_model.model.";
const std::string kConfigFile = "adapter_config.json", kWeightsFile = "adapter_model.safetensors";
// The largest r adapter_config.json may give (int32's range, as peft's checkpoints): shapes built
// from it cannot overflow; an r too large to allocate is refused when the adapter is built.
constexpr int64_t kMaxRank = INT32_MAX;

// peft's rule: a module matches a name when its path is the name or ends with ".<name>".
bool matches(const std::string& path, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (path == n || (path.size() > n.size() && path.compare(path.size() - n.size() - 1, n.size() + 1, "." + n) == 0))
      return true;
  return false;
}

std::string last_component(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string join(const std::vector<std::string>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + xs[i];
  return s;
}

// 1234567 -> "1,234,567" (Python's "{:,d}").
std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

// The model's parameter count as peft prints it: a quantised weight (4-bit: two values a byte)
// counts its values, not its bytes.
int64_t weight_count(const nn::Module& model) {
  int64_t n = 0;
  for (const auto& [name, t] : model.named_parameters()) n += t.numel();
  for (const auto& [path, m] : const_cast<nn::Module&>(model).named_modules())  // no const overload; reads only
    if (const auto* l = dynamic_cast<const nn::Linear*>(m); l && l->weight.dtype() == kUInt8)  // quantised, LoRA or not
      n += l->in_features * l->out_features - l->weight.numel();
    else if (const auto* q = dynamic_cast<const nn::Experts4bit*>(m))  // 4-bit experts: buffers, not parameters
      n += static_cast<int64_t>(q->experts.size()) * q->experts[0].numel();
  return n;
}

// The modules saved whole with the adapter: modules_to_save, plus the norms when they train.
std::vector<std::string> saved_module_names(const LoraConfig& config, nn::Module& model) {
  std::vector<std::string> names = config.modules_to_save;
  if (!config.freeze_norms)
    for (auto& [path, m] : model.named_modules())
      if (nn::is_norm(*m) && !matches(path, names)) names.push_back(last_component(path));
  return names;
}

// Adapter tensors by file key: every LoRA weight and every parameter of a saved module.
std::map<std::string, Tensor> adapter_tensors(nn::Module& model, const std::vector<std::string>& saved_modules) {
  std::map<std::string, Tensor> out;
  for (auto& [path, l] : lora_layers(model)) {
    out[kPrefix + path + ".lora_A.weight"] = l->lora_A->weight;
    out[kPrefix + path + ".lora_B.weight"] = l->lora_B->weight;
  }
  for (auto& [path, l] : lora_experts(model))
    for (size_t i = 0; i < l->parameters.size(); ++i) {
      const std::string at = kPrefix + path + peft_infix(l->parameters, i);
      out[at + ".lora_A.weight"] = l->adapters.at(l->parameters[i])->lora_A->weight;
      out[at + ".lora_B.weight"] = l->adapters.at(l->parameters[i])->lora_B->weight;
    }
  if (!saved_modules.empty())
    for (auto& [path, m] : model.named_modules())
      if (!path.empty() && matches(path, saved_modules))
        for (auto& [name, t] : m->state_dict()) out[kPrefix + path + "." + name] = t;
  return out;
}

}  // namespace

// ---------------------------------------------------------------- LoRALinear

LoRALinear::LoRALinear(const nn::Linear& base, int64_t rank, double alpha, double dropout, Generator& gen,
                       bool autocast_adapter_dtype)
    : nn::Linear("LoRALinear", base.in_features, base.out_features, base.weight, base.bias),
      r(rank),
      lora_alpha(alpha),
      scaling(alpha / static_cast<double>(rank)) {
  TG_CHECK(rank > 0, "LoRALinear", "r must be positive, got ", rank);
  weight.requires_grad_(false);
  if (bias.defined()) bias.requires_grad_(false);
  if (const auto* q = dynamic_cast<const nn::QuantizedLinear*>(&base)) {
    quantized_base = q->with_bias(bias);
    for (const nn::QuantizedSlot& s : quantized_base->state_slots())
      register_buffer(s.name, *s.slot, s.persistent, /*keeps_dtype=*/true);
  }
  const DType layer_dtype = quantized_base ? quantized_base->compute_dtype : weight.dtype();
  // nn::Linear's own init is peft's for A: kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)).
  lora_A = std::make_shared<nn::Linear>(in_features, rank, false, gen);
  lora_B = std::make_shared<nn::Linear>(rank, out_features, false, gen);
  nn::init::zeros_(lora_B->weight);
  const DType adapter_dtype = autocast_adapter_dtype && layer_dtype == kBFloat16 ? kFloat32 : layer_dtype;
  lora_A->to(adapter_dtype, weight.device());
  lora_B->to(adapter_dtype, weight.device());
  lora_dropout = std::make_shared<nn::Dropout>(dropout);
  register_module("lora_dropout", lora_dropout);
  register_module("lora_A", lora_A);
  register_module("lora_B", lora_B);
  train(base.is_training());
}

Tensor LoRALinear::forward(const Tensor& x) {
  if (!enabled_) return quantized_base ? quantized_base->forward(x) : nn::Linear::forward(x);
  if (merged_) return nn::Linear::forward(x);
  // One op for the layer (lora_linear, ops/lora_linear.h): the LoRA products on x's dtype (bf16 adapters' tensor
  // cores for a bf16 layer, as autocast), LoRA-B accumulated into the base GEMM's output. A quantised base is
  // the op's frozen weight, in its compute dtype.
  if (lora_dropout->p == 0.0 || !is_training()) {
    if (!quantized_base) return lora_linear(x, weight, bias, lora_A->weight, lora_B->weight, scaling);
    return tg::to(linear_group(tg::to(x, quantized_base->compute_dtype), {*spec()}, "lora_linear")[0], x.dtype());
  }
  // With dropout the adapters see another x than the base layer: the composition, as peft. x is
  // cast to the adapters' dtype (float32 for a bf16 layer), the LoRA term rounded back to y's.
  Tensor lora = lora_B->forward(lora_A->forward(lora_dropout->forward(tg::to(x, lora_A->weight.dtype()))));
  Tensor base = quantized_base ? quantized_base->forward(x) : nn::Linear::forward(x);
  return add(base, tg::to(mul(lora, scaling), x.dtype()));
}

std::optional<LinearSpec> LoRALinear::spec() const {
  if (!enabled_ && quantized_base) return quantized_base->spec();
  if (merged_ || !enabled_) return LinearSpec{weight, bias};
  if (lora_dropout->p != 0.0 && is_training()) return std::nullopt;
  if (!quantized_base) return LinearSpec{weight, bias, lora_A->weight, lora_B->weight, scaling};
  LinearSpec s = *quantized_base->spec();
  s.lora_A = lora_A->weight, s.lora_B = lora_B->weight, s.scaling = scaling;
  return s;
}

Tensor LoRALinear::delta_weight() const {
  NoGradGuard g;
  return mul(matmul(lora_B->weight, lora_A->weight), scaling);
}

// W +/- delta in the adapters' dtype (float32 for a bfloat16 W with float32 adapters), rounded to
// W's dtype once by copy_.
void LoRALinear::merge() {
  TG_CHECK(!merged_, "LoRALinear::merge", "the adapter is already merged");
  TG_CHECK(enabled_, "LoRALinear::merge", "the adapter is disabled (peft::disable_adapter): merge it after the guard");
  TG_CHECK(!quantized_base, "LoRALinear::merge", "the base weight is ", quantized_base ? quantized_base->format() : "",
           " quantised (", quantized_base ? quantized_base->type_name() : "", "); merging into it is not supported "
           "(peft::merge_and_unload dequantises it and returns a dense layer)");
  NoGradGuard g;
  Tensor delta = delta_weight();
  copy_(weight, add(tg::to(weight, delta.dtype()), delta));
  merged_ = true;
}

void LoRALinear::unmerge() {
  TG_CHECK(merged_, "LoRALinear::unmerge", "the adapter is not merged");
  NoGradGuard g;
  Tensor delta = delta_weight();
  copy_(weight, sub(tg::to(weight, delta.dtype()), delta));
  merged_ = false;
}

void LoRALinear::set_adapter_enabled(bool enabled) {
  TG_CHECK(!merged_ || enabled, "LoRALinear::set_adapter_enabled", "the adapter is merged into the base weight: "
           "unmerge it first to compute the base alone");
  enabled_ = enabled;
}

AdapterDisabled::AdapterDisabled(nn::Module& model) {
  const auto layers = lora_layers(model);
  TG_CHECK(!layers.empty(), "peft::disable_adapter", "the model has no LoRA layer (peft::apply_lora wraps them)");
  for (const auto& [path, l] : layers)
    TG_CHECK(!l->merged(), "peft::disable_adapter", "the LoRA layer '", path, "' is merged into its base weight: ",
             "unmerge it (peft::unmerge) to compute the base alone");
  for (const auto& [path, l] : layers) {
    previous_.emplace_back(l, l->adapter_enabled());
    l->set_adapter_enabled(false);
  }
}

AdapterDisabled::~AdapterDisabled() {
  for (const auto& [layer, enabled] : previous_) layer->set_adapter_enabled(enabled);
}

std::string LoRALinear::extra_repr() const {
  std::ostringstream os;
  os << nn::Linear::extra_repr() << ", r=" << r << ", lora_alpha=" << lora_alpha << (merged_ ? ", merged" : "");
  return os.str();
}

// ---------------------------------------------------------------- wrapping

std::string LoraReport::str() const {
  std::ostringstream os;
  os << "LoRA on " << wrapped.size() << " modules";
  if (!saved_modules.empty()) os << ", " << saved_modules.size() << " modules trained whole";
  os << ": trainable " << trainable_params << " of " << all_params << " parameters";
  return os.str();
}

std::vector<std::pair<std::string, LoRALinear*>> lora_layers(nn::Module& model) {
  std::vector<std::pair<std::string, LoRALinear*>> out;
  for (auto& [path, m] : model.named_modules())
    if (auto* l = dynamic_cast<LoRALinear*>(m)) out.emplace_back(path, l);
  return out;
}

bool has_lora(nn::Module& model) { return !lora_layers(model).empty() || !lora_experts(model).empty(); }

namespace {

// What apply_lora will change, checked in full first so that a bad config changes nothing.
struct LoraPlan {
  std::vector<std::string> wrapped;        // target Linear paths
  std::vector<std::string> saved_modules;  // modules trained whole
  std::map<std::string, std::vector<std::string>> experts;  // MoE experts' paths -> the weights adapted, in order
};

// The names target_modules can give: each Linear's last path component, once, in model order.
std::vector<std::string> linear_leaf_names(nn::Module& model) {
  std::vector<std::string> names;
  for (auto& [path, m] : model.named_modules())
    if (!path.empty() && dynamic_cast<nn::Linear*>(m) && path.find(".lora_") == std::string::npos &&
        std::find(names.begin(), names.end(), last_component(path)) == names.end())
      names.push_back(last_component(path));
  return names;
}

// The model's family, for errors ("the llama model"); "" when it is not a CausalLM.
std::string family_of(const nn::Module& model) {
  const auto* lm = dynamic_cast<const nn::CausalLM*>(&model);
  return lm ? lm->architecture().model_type : "";
}

LoraPlan plan_lora(nn::Module& model, const LoraConfig& config) {
  TG_CHECK(config.r > 0, "apply_lora", "r must be positive, got ", config.r);
  const std::string family = family_of(model);
  TG_CHECK(!config.target_modules.empty() || !config.target_parameters.empty(), "apply_lora", "target_modules is empty",
           family.empty() ? "" : " (peft has no default targets for " + family + ")", ": name the Linear layers to ",
           "adapt (", join(linear_leaf_names(model)), ") or \"", kAllLinear, "\"");
  TG_CHECK(config.target_parameters.empty() || config.lora_dropout == 0, "apply_lora", "lora_dropout ",
           config.lora_dropout, " with target_parameters: peft's LoRA on parameters takes no dropout");
  TG_CHECK(config.lora_dropout >= 0 && config.lora_dropout <= 1, "apply_lora", "lora_dropout must be in [0, 1], got ",
           config.lora_dropout);
  const std::vector<std::string> targets = expand_target_modules(model, config.target_modules);
  LoraPlan plan;
  std::vector<std::string> unmatched = targets;
  for (auto& [path, m] : model.named_modules()) {
    if (path.empty()) continue;
    if (dynamic_cast<nn::MoeExperts*>(m))
      for (const char* p : {"gate_up_proj", "down_proj"})  // registration order
        if (matches(path + "." + p, config.target_parameters)) plan.experts[path].push_back(p);
    if (!matches(path, targets)) continue;
    TG_CHECK(dynamic_cast<nn::Linear*>(m) != nullptr, "apply_lora", "target '", path, "' is a ", m->type_name(),
             "; LoRA wraps Linear layers only",
             dynamic_cast<nn::MoeExperts*>(m) ? " (its expert weights: target_parameters)" : "");
    plan.wrapped.push_back(path);
    const std::string& wrapped = path;  // clang's lambdas cannot capture a structured binding
    std::erase_if(unmatched, [&](const std::string& t) { return matches(wrapped, {t}); });
  }
  // peft wraps what any name matches; a misspelt name beside good ones would be dropped silently.
  TG_CHECK(unmatched.empty(), "apply_lora", "target_modules ", unmatched.size() == 1 ? "entry '" : "entries '",
           join(unmatched), "' match", unmatched.size() == 1 ? "es" : "", " no module of ", model.type_name(),
           "; its Linear layers are ", join(linear_leaf_names(model)), " (or \"", kAllLinear, "\": all but the output head)");
  for (const std::string& t : config.target_parameters) {
    bool found = false;
    for (const auto& [path, params] : plan.experts)
      for (const std::string& p : params) found = found || matches(path + "." + p, {t});
    TG_CHECK(found, "apply_lora", "target_parameters entry '", t, "' names no expert weight of ", model.type_name(),
             " (gate_up_proj or down_proj of a MoE block, e.g. \"mlp.experts.gate_up_proj\")");
  }
  const std::vector<std::string> saved = saved_module_names(config, model);
  for (auto& [path, m] : model.named_modules())
    if (!path.empty() && matches(path, saved)) plan.saved_modules.push_back(path);
  for (const auto& name : config.modules_to_save) {
    bool found = false;
    for (const auto& p : plan.saved_modules) found = found || matches(p, {name});
    TG_CHECK(found, "apply_lora", "modules_to_save entry '", name, "' matches no module of ", model.type_name());
  }
  return plan;
}

}  // namespace

std::vector<std::string> expand_target_modules(nn::Module& model, const std::vector<std::string>& target_modules) {
  if (target_modules.size() != 1 || target_modules[0] != kAllLinear) return target_modules;
  // peft's _maybe_include_all_linear_layers: every Linear by its full path, but the output head.
  const auto* lm = dynamic_cast<const nn::CausalLM*>(&model);
  const nn::Module* head = lm ? lm->lm_head.get() : nullptr;
  std::vector<std::string> paths;
  for (auto& [path, m] : model.named_modules())
    if (!path.empty() && m != head && dynamic_cast<nn::Linear*>(m) && path.find(".lora_") == std::string::npos)
      paths.push_back(path);
  TG_CHECK(!paths.empty(), "apply_lora", "target_modules \"", kAllLinear, "\": ", model.type_name(),
           " has no Linear layer but its output head");
  return paths;
}

LoraReport apply_lora(nn::Module& model, const LoraConfig& config, Generator& gen) {
  const LoraPlan plan = plan_lora(model, config);
  TG_CHECK(!has_lora(model), "apply_lora", model.type_name(),
           " already has LoRA layers (merge_and_unload it first, or load the adapter into it)");
  LoraReport report{plan.wrapped, {}, plan.saved_modules};
  model.requires_grad_(false);  // everything frozen; the adapters and saved modules train
  for (const auto& path : report.wrapped) {
    auto base = std::dynamic_pointer_cast<nn::Linear>(model.get_submodule(path));
    model.replace_module(path, std::make_shared<LoRALinear>(*base, config.r, config.lora_alpha, config.lora_dropout,
                                                            gen, config.autocast_adapter_dtype));
  }
  for (const auto& [path, params] : plan.experts) {
    auto base = std::dynamic_pointer_cast<nn::MoeExperts>(model.get_submodule(path));
    model.replace_module(path, std::make_shared<LoRAExperts>(*base, params, config.r, config.lora_alpha, gen,
                                                             config.autocast_adapter_dtype));
    for (const std::string& p : params) report.wrapped_parameters.push_back(path + "." + p);
  }
  for (const auto& path : report.saved_modules) model.get_submodule(path)->requires_grad_(true);
  report.trainable_params = model.num_parameters(true);
  report.all_params = weight_count(model);
  return report;
}

std::string trainable_parameters_line(const nn::Module& model) {
  const int64_t trainable = model.num_parameters(true), all = weight_count(model);
  std::ostringstream os;
  os << "trainable params: " << with_commas(trainable) << " || all params: " << with_commas(all)
     << " || trainable%: " << std::fixed << std::setprecision(4)
     << (all ? 100.0 * static_cast<double>(trainable) / static_cast<double>(all) : 0.0);
  return os.str();
}

void print_trainable_parameters(const nn::Module& model, std::ostream& os) {
  os << trainable_parameters_line(model) << "\n";
}
void print_trainable_parameters(const nn::Module& model) { print_trainable_parameters(model, std::cout); }

void merge(nn::Module& model) {
  for (auto& [path, l] : lora_layers(model)) l->merge();
  for (auto& [path, l] : lora_experts(model)) l->merge();
}

void unmerge(nn::Module& model) {
  for (auto& [path, l] : lora_layers(model)) l->unmerge();
  for (auto& [path, l] : lora_experts(model)) l->unmerge();
}

void merge_and_unload(nn::Module& model) {
  // As peft warns for a 4-bit base: the merged weight is the dequantised base plus the adapter, rounded.
  bool told = false;
  auto say = [&](const std::string& base, DType dtype, const char* becomes) {
    if (!told)
      std::cerr << "merge_and_unload: the " << base << " is dequantised to " << dtype << " (the adapters merged there): "
                << becomes << ", within that rounding of base + adapter\n";
    told = true;
  };
  auto tell = [&](const nn::QuantizedLinear& q) {
    say(std::string(q.format()) + " base", q.compute_dtype,
        (std::string("its layers are dense ") + dtype_name(q.compute_dtype) + " Linear layers").c_str());
  };
  NoGradGuard g;
  for (auto& [path, l] : lora_layers(model)) {
    std::shared_ptr<nn::Linear> plain;
    if (l->quantized_base) {
      const DType dtype = l->quantized_base->compute_dtype;
      tell(*l->quantized_base);
      const Tensor delta = l->delta_weight();
      const Tensor base = tg::to(l->quantized_base->dequantized_weight(dtype), delta.dtype());
      plain = std::make_shared<nn::Linear>(tg::to(add(base, delta), dtype), l->bias);
    } else {
      if (!l->merged()) l->merge();
      plain = std::make_shared<nn::Linear>(l->weight, l->bias);
    }
    plain->train(l->is_training());
    model.replace_module(path, plain);  // l is destroyed here; do not touch it after
  }
  auto tell_experts = [&](const nn::MoeExperts& m) { say("4-bit experts' base", m.weight_dtype(), "dense experts"); };
  for (auto& [path, l] : lora_experts(model)) {
    if (l->quantized()) tell_experts(*l), l->dequantize();
    if (!l->merged()) l->merge();
    auto plain = std::make_shared<nn::MoeExperts>("MoeExperts", *l);
    model.replace_module(path, plain);  // l is destroyed here
  }
  // The quantised layers without an adapter too: the model comes back dense. (The 4-bit experts'
  // submodules go with dequantize: not while the walk still lists them.)
  std::vector<nn::MoeExperts*> quantized_experts;
  for (auto& [path, m] : model.named_modules()) {
    if (auto* q = dynamic_cast<nn::QuantizedLinear*>(m)) {
      tell(*q);
      auto plain = std::make_shared<nn::Linear>(q->dequantized_weight(q->compute_dtype), q->bias);
      plain->train(q->is_training());
      model.replace_module(path, plain);
    } else if (auto* experts = dynamic_cast<nn::MoeExperts*>(m); experts && experts->quantized()) {
      quantized_experts.push_back(experts);
    }
  }
  for (nn::MoeExperts* experts : quantized_experts) tell_experts(*experts), experts->dequantize();
}

// ---------------------------------------------------------------- adapter files

std::string adapter_config_json(const LoraConfig& c, bool fan_in_fan_out) {
  using json::Value;
  Value targets = Value::array(), saved = Value::array(), parameters = Value::array();
  for (const auto& t : c.target_modules) targets.push_back(t);
  for (const auto& t : c.target_parameters) parameters.push_back(t);
  for (const auto& m : c.modules_to_save) saved.push_back(m);
  Value cfg = Value::object();
  const double alpha = c.lora_alpha;
  // peft writes an integral alpha as an integer; the range check keeps the cast defined.
  const bool integral = std::abs(alpha) < 9.0e15 && std::trunc(alpha) == alpha;
  cfg.set("alpha_pattern", Value::object())
      .set("auto_mapping", Value())
      .set("base_model_name_or_path", c.base_model_name_or_path.empty() ? Value() : Value(c.base_model_name_or_path))
      .set("bias", "none")
      .set("fan_in_fan_out", fan_in_fan_out)
      .set("inference_mode", true)
      .set("init_lora_weights", true)
      .set("layer_replication", Value())
      .set("layers_pattern", Value())
      .set("layers_to_transform", Value())
      .set("loftq_config", Value::object())
      .set("lora_alpha", integral ? Value(static_cast<int64_t>(alpha)) : Value(alpha))
      .set("lora_dropout", c.lora_dropout)
      .set("megatron_config", Value())
      .set("megatron_core", "megatron.core")
      .set("modules_to_save", c.modules_to_save.empty() ? Value() : saved)
      .set("peft_type", "LORA")
      .set("r", c.r)
      .set("rank_pattern", Value::object())
      .set("revision", Value())
      .set("target_modules", c.target_modules.empty() && !c.target_parameters.empty() ? Value() : targets)
      .set("target_parameters", c.target_parameters.empty() ? Value() : parameters)
      .set("task_type", c.task_type)
      .set("use_dora", false)
      .set("use_rslora", false);
  return json::dump(cfg, 2, /*sort_keys=*/true);  // peft writes indent 2, sorted keys
}

LoraConfig parse_adapter_config(const std::string& text, const std::string& source) {
  try {
    json::Value v = json::parse(text);
    TG_CHECK(v.is_object(), "load_adapter", "'", source, "' is not a JSON object");
    TG_CHECK(v.at("peft_type").as_string("peft_type") == "LORA", "load_adapter", "'", source,
             "' has peft_type '", v.at("peft_type").as_string(), "', wants LORA");
    LoraConfig c;
    c.r = v.at("r").as_int("r");
    TG_CHECK(c.r >= 1 && c.r <= kMaxRank, "load_adapter", "r is ", c.r, ", wants an integer in [1, ", kMaxRank, "]");
    c.lora_alpha = v.at("lora_alpha").as_double("lora_alpha");
    TG_CHECK(std::isfinite(c.lora_alpha), "load_adapter", "lora_alpha is ", c.lora_alpha, ", wants a finite number");
    if (const auto* d = v.find("lora_dropout"); d && !d->is_null()) c.lora_dropout = d->as_double("lora_dropout");
    TG_CHECK(c.lora_dropout >= 0 && c.lora_dropout <= 1, "load_adapter", "lora_dropout is ", c.lora_dropout,
             ", wants a number in [0, 1]");
    const json::Value& tm = v.at("target_modules");
    c.target_modules.clear();
    if (tm.is_string()) {
      fail("load_adapter", "target_modules given as a regular expression ('", tm.as_string(), "') is not supported");
    }
    if (!tm.is_null())
      for (const auto& t : tm.as_array("target_modules")) c.target_modules.push_back(t.as_string("target_modules entry"));
    if (const auto* tp = v.find("target_parameters"); tp && !tp->is_null())
      for (const auto& t : tp->as_array("target_parameters"))
        c.target_parameters.push_back(t.as_string("target_parameters entry"));
    if (const auto* m = v.find("modules_to_save"); m && !m->is_null())
      for (const auto& t : m->as_array("modules_to_save")) c.modules_to_save.push_back(t.as_string("modules_to_save entry"));
    if (const auto* b = v.find("bias"); b && !b->is_null())
      TG_CHECK(b->as_string("bias") == "none", "load_adapter", "bias '", b->as_string(), "' is not supported (only none)");
    // fan_in_fan_out (peft's mark for Conv1D targets, GPT-2's) changes how peft merges, not A or B.
    for (const char* pattern : {"rank_pattern", "alpha_pattern"})
      if (const auto* p = v.find(pattern); p && !p->is_null())
        TG_CHECK(p->is_object() && p->size() == 0, "load_adapter", pattern, " ", json::dump(*p),
                 " is not supported (one r and lora_alpha for every module)");
    if (const auto* l = v.find("layers_to_transform"); l && !l->is_null())
      fail("load_adapter", "layers_to_transform ", json::dump(*l), " is not supported (every matching layer)");
    for (const char* flag : {"use_dora", "use_rslora", "lora_bias"})
      if (const auto* f = v.find(flag); f && !f->is_null())
        TG_CHECK(!f->as_bool(flag), "load_adapter", flag, " adapters are not supported");
    if (const auto* n = v.find("base_model_name_or_path"); n && n->is_string()) c.base_model_name_or_path = n->as_string();
    if (const auto* t = v.find("task_type"); t && t->is_string()) c.task_type = t->as_string();
    return c;
  } catch (const Error& e) {
    fail("load_adapter", "'", source, "': ", e.what());
  }
}

void save_adapter(nn::Module& model, const std::string& dir, const LoraConfig& config) {
  TG_CHECK(has_lora(model), "save_adapter", model.type_name(), " has no LoRA layers (call apply_lora)");
  const std::vector<std::string> saved = saved_module_names(config, model);
  LoraConfig written = config;
  if (const auto* lm = dynamic_cast<const nn::CausalLM*>(&model); lm && written.base_model_name_or_path.empty())
    written.base_model_name_or_path = lm->name_or_path;  // as peft fills it from the model
  written.target_modules = expand_target_modules(model, config.target_modules);
  written.modules_to_save = saved;
  written.freeze_norms = true;  // trained norms travel as modules_to_save
  bool conv1d = false;  // peft wants fan_in_fan_out for layers transformers stores as Conv1D
  for (auto& [path, l] : lora_layers(model)) conv1d = conv1d || nn::is_hf_conv1d(model, path);
  const std::string cfg = adapter_config_json(written, conv1d);
  // Both files as one unit: a reader never sees new weights beside the old config (its alpha).
  io::write_folder_atomic(dir, [&](io::FolderWriter& out) {
    safetensors::write_file(out, kWeightsFile, adapter_tensors(model, saved), {{"format", "pt"}});
    out.write(kConfigFile, cfg + "\n");
  });
}

LoraConfig load_adapter(nn::Module& model, const std::string& dir, Generator& gen, const LoadAdapterOptions& options) {
  TG_CHECK(std::filesystem::is_directory(dir), "load_adapter", "no adapter folder '", dir, "'");
  const io::Folder folder(dir);  // both files from one save
  const std::string cfg_path = folder.path_of(kConfigFile), st_path = folder.path_of(kWeightsFile);
  std::vector<uint8_t> cfg_bytes = folder.read(kConfigFile, io::kMaxConfigBytes);
  LoraConfig config = parse_adapter_config(std::string(cfg_bytes.begin(), cfg_bytes.end()), cfg_path);
  if (const std::string mismatch = adapter_base_mismatch(config, model); !mismatch.empty())
    TG_CHECK(options.ignore_base_mismatch, "load_adapter", "'", cfg_path, "': ", mismatch,
             " (load it onto its own base, or pass ignore_base_mismatch to load it here anyway)");
  const std::vector<uint8_t> st_bytes = folder.read(kWeightsFile);
  safetensors::TensorMap file = safetensors::deserialize(st_bytes.data(), st_bytes.size(), st_path).tensors;

  // Everything is checked against the model before it changes: the config against an existing
  // wrapping, or (unwrapped) against what apply_lora would build; then every key and shape.
  const LoraPlan plan = plan_lora(model, config);
  const auto layers = lora_layers(model);
  std::map<std::string, Shape> want;
  if (has_lora(model)) {
    std::vector<std::string> paths;
    for (const auto& [path, l] : layers) {
      paths.push_back(path);
      TG_CHECK(l->r == config.r && l->lora_alpha == config.lora_alpha, "load_adapter", "'", cfg_path, "' has r ",
               config.r, " lora_alpha ", config.lora_alpha, ", but ", model.type_name(), " is wrapped with r ", l->r,
               " lora_alpha ", l->lora_alpha, " at '", path, "' (load into an unwrapped model)");
      // Merged, W already holds the old adapter and forward skips the new one.
      TG_CHECK(!l->merged(), "load_adapter", "'", path, "' is merged: unmerge the model before loading an adapter");
    }
    std::map<std::string, std::vector<std::string>> experts;
    for (const auto& [path, l] : lora_experts(model)) {
      TG_CHECK(l->r == config.r && l->lora_alpha == config.lora_alpha && !l->merged(), "load_adapter", "'", cfg_path,
               "' has r ", config.r, " lora_alpha ", config.lora_alpha, ", but '", path, "' is adapted with r ", l->r,
               " lora_alpha ", l->lora_alpha, l->merged() ? ", merged" : "", " (load into an unwrapped model)");
      experts[path] = l->parameters;
    }
    TG_CHECK(paths == plan.wrapped && experts == plan.experts, "load_adapter", "'", cfg_path, "' targets [",
             join(plan.wrapped), "] and ", plan.experts.size(), " MoE blocks' experts, but ", model.type_name(),
             " is wrapped at [", join(paths), "] and ", experts.size(), " (load into an unwrapped model)");
    for (const auto& [key, t] : adapter_tensors(model, config.modules_to_save)) want[key] = t.shape();
  } else {
    for (const auto& path : plan.wrapped) {
      const auto* linear = dynamic_cast<const nn::Linear*>(model.get_submodule(path).get());
      want[kPrefix + path + ".lora_A.weight"] = {config.r, linear->in_features};
      want[kPrefix + path + ".lora_B.weight"] = {linear->out_features, config.r};
    }
    for (const auto& [path, params] : plan.experts) {
      const auto* experts = dynamic_cast<const nn::MoeExperts*>(model.get_submodule(path).get());
      for (size_t i = 0; i < params.size(); ++i) {
        const Shape w = experts->weight(params[i]).shape();  // [E, out, in]
        const std::string at = kPrefix + path + peft_infix(params, i);
        want[at + ".lora_A.weight"] = {config.r * w[0], w[2]};
        want[at + ".lora_B.weight"] = {w[1], config.r * w[0]};
      }
    }
    for (const auto& path : plan.saved_modules)
      for (const auto& [name, t] : model.get_submodule(path)->state_dict()) want[kPrefix + path + "." + name] = t.shape();
  }
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [key, shape] : want) {
    auto it = file.find(key);
    if (it == file.end()) missing.push_back(key);
    else if (it->second.shape() != shape)
      mismatched.push_back(key + " (file " + shape_str(it->second.shape()) + ", model " + shape_str(shape) + ")");
  }
  for (const auto& [key, t] : file)
    if (!want.count(key)) unexpected.push_back(key);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string msg = "'" + st_path + "' does not fit " + model.type_name() + " (the model is left unchanged):";
    if (!missing.empty()) msg += "\n  missing keys (" + std::to_string(missing.size()) + "): " + name_list(missing);
    if (!unexpected.empty()) msg += "\n  unexpected keys (" + std::to_string(unexpected.size()) + "): " + name_list(unexpected);
    if (!mismatched.empty()) msg += "\n  shape mismatches (" + std::to_string(mismatched.size()) + "): " + name_list(mismatched);
    fail("load_adapter", msg);
  }

  if (!has_lora(model)) apply_lora(model, config, gen);
  NoGradGuard g;
  for (const auto& [key, t] : adapter_tensors(model, config.modules_to_save)) copy_(t, file.at(key));
  return config;
}

}  // namespace tg::peft
