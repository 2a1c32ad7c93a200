// config.json of the mixture-of-experts families, read into and written from MoeConfig: Qwen3-MoE,
// Mixtral and gpt-oss, with their registry entries and the hub's checkpoint layouts (per-expert
// tensors, which transformers 5 fuses as it loads and splits again as it saves).
#include <string>

#include "nn/models/architecture.h"
#include "nn/models/config_fields.h"
#include "nn/models/gguf.h"
#include "nn/models/moe_lm.h"

namespace tg::nn {
namespace {

// A list of integers in [0, bound) (Qwen3-MoE's mlp_only_layers).
std::vector<int64_t> read_layer_list(const ConfigFields& f, const std::string& key, int64_t bound) {
  std::vector<int64_t> out;
  const json::Value* v = f.get(key);
  if (!v) return out;
  if (!v->is_array()) f.bad(key, "a list of layer indices");
  for (const json::Value& e : v->as_array()) {
    if (!e.is_int() || e.as_int() < 0 || e.as_int() >= bound)
      f.bad(key, "layer indices in [0, " + std::to_string(bound) + ")");
    out.push_back(e.as_int());
  }
  return out;
}

// The shared MoE fields; `experts_key` is the family's name for the expert count.
MoeConfig read_moe_fields(const ConfigFields& f, LlamaConfig base, const char* experts_key, int64_t experts,
                          int64_t top_k, double aux_coef) {
  MoeConfig c;
  c.base = std::move(base);
  c.num_experts = f.integer(experts_key, experts);
  c.num_experts_per_tok = f.integer("num_experts_per_tok", top_k);
  c.output_router_logits = f.boolean("output_router_logits", false);
  c.router_aux_loss_coef = f.number("router_aux_loss_coef", aux_coef);
  return c;
}

// The theta of a family whose default is not Llama's, when config.json names none.
void default_theta(const ConfigFields& f, MoeConfig& c, double theta) {
  if (!f.get("rope_theta") && !f.get("rope_parameters") && !f.get("rope_scaling")) c.base.rope_theta = theta;
}

ModelBuilder qwen3_moe(const ConfigFields& f) {
  LlamaConfig base = read_llama_fields(f, "Qwen3MoeForCausalLM", 151936, 1e-6);
  base.attention_bias = f.boolean("attention_bias", false);
  base.qk_norm = true;
  // transformers 5 also names the expert count num_local_experts (attribute_map)
  const char* experts_key = f.get("num_experts") || !f.get("num_local_experts") ? "num_experts" : "num_local_experts";
  MoeConfig c = read_moe_fields(f, std::move(base), experts_key, 128, 8, 0.001);
  c.moe_intermediate_size = f.integer("moe_intermediate_size", 768);
  c.norm_topk_prob = f.boolean("norm_topk_prob", false);
  c.decoder_sparse_step = f.integer("decoder_sparse_step", 1);
  c.mlp_only_layers = read_layer_list(f, "mlp_only_layers", c.base.num_hidden_layers);
  c.max_window_layers = f.integer("max_window_layers", c.base.num_hidden_layers, /*lo=*/0);
  if (f.boolean("use_sliding_window", false))
    f.unsupported("use_sliding_window", "wants false: Qwen's per-layer windows are not implemented");
  f.integer("sliding_window", 0, /*lo=*/0);  // unused without use_sliding_window (transformers makes it null)
  refuse_partial_rotary(f, c.base.rope_scaling);
  return builder_of<MoeForCausalLM>(validated(f, c));
}

ModelBuilder mixtral(const ConfigFields& f) {
  MoeConfig c = read_moe_fields(f, read_llama_fields(f, "MixtralForCausalLM", 32000, 1e-5), "num_local_experts", 8,
                                2, 0.001);
  default_theta(f, c, 1e6);
  c.base.sliding_window = f.integer("sliding_window", 0, /*lo=*/0);
  c.norm_topk_prob = true;  // Mixtral's router always renormalises its top-k
  if (f.number("router_jitter_noise", 0.0) != 0.0)
    f.unsupported("router_jitter_noise", "wants 0.0: the router's training noise is not implemented");
  refuse_partial_rotary(f, c.base.rope_scaling);
  return builder_of<MoeForCausalLM>(validated(f, c));
}

ModelBuilder gpt_oss(const ConfigFields& f) {
  LlamaConfig base = read_llama_fields(f, "GptOssForCausalLM", 201088, 1e-5);
  base.attention_bias = f.boolean("attention_bias", true);
  if (!f.get("head_dim")) base.attention_head_dim = 64;
  base.sliding_window = f.integer("sliding_window", 128, /*lo=*/0);
  if (!f.get("rope_parameters") && !f.get("rope_scaling")) {  // transformers' default: YaRN over 4096 positions
    base.rope_scaling.rope_type = "yarn";
    base.rope_scaling.factor = 32.0;
    base.rope_scaling.original_max_position_embeddings = 4096;
    base.rope_scaling.truncate = false;
  }
  MoeConfig c = read_moe_fields(f, std::move(base), "num_local_experts", 128, 4, 0.001);
  default_theta(f, c, 150000.0);
  if (f.get("experts_per_token") && f.integer("experts_per_token", 0) != c.num_experts_per_tok)
    f.bad("experts_per_token", "num_experts_per_tok's value (" + std::to_string(c.num_experts_per_tok) + ")");
  f.integer("initial_context_length", 0, /*lo=*/0);  // the original checkpoint's, not used by transformers
  c.swiglu_alpha = f.number("swiglu_alpha", 1.702, 1e-300);
  c.swiglu_limit = f.number("swiglu_limit", 7.0, 1e-300);
  const int64_t L = c.base.num_hidden_layers;
  if (const json::Value* t = f.get("layer_types")) {
    if (!t->is_array() || static_cast<int64_t>(t->size()) != L)
      f.bad("layer_types", "a list of one entry per layer (num_hidden_layers " + std::to_string(L) + ")");
    for (const json::Value& l : t->as_array()) {
      if (!l.is_string() || (l.as_string() != "sliding_attention" && l.as_string() != "full_attention"))
        f.unsupported("layer_types", "wants \"sliding_attention\" or \"full_attention\" for every layer");
      c.sliding_layers.push_back(l.as_string() == "sliding_attention");
    }
  } else {
    for (int64_t i = 0; i < L; ++i) c.sliding_layers.push_back(i % 2 == 0);  // transformers' default
  }
  if (const json::Value* q = f.get("quantization_config")) {
    const json::Value* method = q->is_object() ? q->find("quant_method") : nullptr;
    if (!method || !method->is_string() || method->as_string() != "mxfp4")
      f.unsupported("quantization_config", "gpt-oss folders load with quant_method \"mxfp4\" (dequantised to "
                                           "bfloat16) or unquantised");
  }
  refuse_partial_rotary(f, c.base.rope_scaling);
  return builder_of<MoeForCausalLM>(validated(f, c));
}

const std::vector<std::string> kTargets = {"q_proj", "k_proj", "v_proj", "o_proj"};
const std::vector<std::string> kIgnored = {".rotary_emb.inv_freq"};

// The hub's per-expert names (transformers 5's conversion_mapping "qwen2_moe" and "mixtral").
const CheckpointLayout kQwen3MoeLayout{
    .renames = {},
    .experts = {{"mlp.experts.gate_up_proj", {"mlp.experts.{e}.gate_proj.weight", "mlp.experts.{e}.up_proj.weight"}},
                {"mlp.experts.down_proj", {"mlp.experts.{e}.down_proj.weight"}}}};
const CheckpointLayout kMixtralLayout{
    .renames = {{"block_sparse_moe.gate.weight", "mlp.gate.weight"}},
    .experts = {{"mlp.experts.gate_up_proj",
                 {"block_sparse_moe.experts.{e}.w1.weight", "block_sparse_moe.experts.{e}.w3.weight"}},
                {"mlp.experts.down_proj", {"block_sparse_moe.experts.{e}.w2.weight"}}}};

}  // namespace

// nn/models/moe_gguf.cpp
GgufModel qwen3_moe_gguf(const CausalLM& model);
GgufModel mixtral_gguf(const CausalLM& model);
GgufModel gpt_oss_gguf(const CausalLM& model);

json::Value MoeForCausalLM::config_json() const {
  using json::Value;
  const MoeConfig& c = config;
  Value v = llama_fields_json(c.base, sized_config_json());
  v.set("num_experts_per_tok", c.num_experts_per_tok)
      .set("output_router_logits", c.output_router_logits)
      .set("router_aux_loss_coef", c.router_aux_loss_coef);
  const std::string& arch = c.base.architecture;
  if (arch == "Qwen3MoeForCausalLM") {
    Value dense = Value::array({});
    for (int64_t l : c.mlp_only_layers) dense.push_back(l);
    v.set("attention_bias", c.base.attention_bias)
        .set("num_experts", c.num_experts)
        .set("moe_intermediate_size", c.moe_intermediate_size)
        .set("norm_topk_prob", c.norm_topk_prob)
        .set("decoder_sparse_step", c.decoder_sparse_step)
        .set("mlp_only_layers", dense)
        .set("max_window_layers", c.max_window_layers)
        .set("use_sliding_window", false)
        .set("sliding_window", Value());
  } else if (arch == "MixtralForCausalLM") {
    v.set("num_local_experts", c.num_experts)
        .set("router_jitter_noise", 0.0)
        .set("sliding_window", c.base.sliding_window ? Value(c.base.sliding_window) : Value());
  } else {
    Value types = Value::array({});
    for (bool sliding : c.sliding_layers) types.push_back(sliding ? "sliding_attention" : "full_attention");
    v.set("attention_bias", c.base.attention_bias)
        .set("num_local_experts", c.num_experts)
        .set("sliding_window", c.base.sliding_window)
        .set("layer_types", types)
        .set("swiglu_limit", c.swiglu_limit);
    if (c.swiglu_alpha != 1.702) v.set("swiglu_alpha", c.swiglu_alpha);
  }
  return v;
}

extern const Architecture kQwen3MoeArchitecture{.name = "Qwen3MoeForCausalLM", .model_type = "qwen3_moe",
    .base_prefix = "model.", .embedding = "model.embed_tokens.weight", .ignored_suffixes = kIgnored,
    .lora_targets = kTargets, .parse = qwen3_moe, .gguf = qwen3_moe_gguf,
    .checkpoint_layout = kQwen3MoeLayout};
extern const Architecture kMixtralArchitecture{.name = "MixtralForCausalLM", .model_type = "mixtral",
    .base_prefix = "model.", .embedding = "model.embed_tokens.weight", .ignored_suffixes = kIgnored,
    .lora_targets = kTargets, .parse = mixtral, .gguf = mixtral_gguf,
    .checkpoint_layout = kMixtralLayout};
extern const Architecture kGptOssArchitecture{.name = "GptOssForCausalLM", .model_type = "gpt_oss",
    .base_prefix = "model.", .embedding = "model.embed_tokens.weight", .ignored_suffixes = kIgnored,
    .lora_targets = kTargets, .parse = gpt_oss, .gguf = gpt_oss_gguf};

}  // namespace tg::nn
