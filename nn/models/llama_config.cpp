// config.json of the Llama-like families, read into and written from LlamaConfig: Llama (1-3.x),
// Mistral, Qwen2 / Qwen2.5 and Qwen3, with their registry entries. What a family's checkpoints use
// is read; what would change the computation in a way not implemented is refused by name.
#include <string>

#include "core/limits.h"
#include "nn/models/architecture.h"
#include "nn/models/config_fields.h"
#include "nn/models/llama.h"

namespace tg::nn {
namespace {

// Whatever the family, a sliding window only where the family uses it (layer_types all full).
void refuse_sliding_layers(const ConfigFields& f) {
  if (f.boolean("use_sliding_window", false))
    f.unsupported("use_sliding_window", "wants false: Qwen's per-layer windows are not implemented");
  if (const json::Value* t = f.get("layer_types")) {
    if (!t->is_array()) f.unsupported("layer_types", "wants a list");
    for (const json::Value& l : t->as_array())
      if (!l.is_string() || l.as_string() != "full_attention")
        f.unsupported("layer_types", "wants every layer \"full_attention\"");
  }
}

}  // namespace

LlamaConfig read_llama_fields(const ConfigFields& f, const LlamaConfig& defaults) {
  LlamaConfig c;
  c.architecture = defaults.architecture;
  c.vocab_size = f.integer("vocab_size", defaults.vocab_size);
  c.hidden_size = f.integer("hidden_size", defaults.hidden_size);
  c.intermediate_size = f.integer("intermediate_size", defaults.intermediate_size);
  c.num_hidden_layers = f.integer("num_hidden_layers", defaults.num_hidden_layers, 1, kMaxLayers);
  c.num_attention_heads = f.integer("num_attention_heads", defaults.num_attention_heads);
  // 0: num_attention_heads
  c.num_key_value_heads = f.integer("num_key_value_heads", defaults.num_key_value_heads, /*lo=*/0);
  c.max_position_embeddings = f.integer("max_position_embeddings", defaults.max_position_embeddings, 1, kMaxContext);
  c.rms_norm_eps = f.number("rms_norm_eps", defaults.rms_norm_eps);
  c.initializer_range = f.number("initializer_range", defaults.initializer_range);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", defaults.tie_word_embeddings);
  c.attention_head_dim = f.integer("head_dim", 0, /*lo=*/0);
  c.rope_theta = f.number("rope_theta", defaults.rope_theta, /*lo=*/1e-300);
  // transformers 5 takes rope_scaling over rope_parameters when both are given.
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (const json::Value* r = f.get(key)) read_rope(f, key, *r, c.rope_theta, c.rope_scaling, c.max_position_embeddings);
  if (!f.get("rope_scaling") && !f.get("rope_parameters"))
    c.rope_scaling.partial_rotary_factor = f.number("partial_rotary_factor", 1.0, /*lo=*/1e-300);
  if (f.string("hidden_act", "silu") != "silu") f.unsupported("hidden_act", "wants \"silu\"");
  if (f.probability("attention_dropout", 0.0) != 0.0) f.unsupported("attention_dropout", "wants 0.0");
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    // An explicit null too (SmolLM3's bos_token_id): left out, transformers would take its default.
    const json::Value* id = f.json().find(key);
    if (!id) continue;
    bool ids = id->is_null() || id->is_int() || id->is_array();
    if (id->is_array())
      for (const json::Value& e : id->as_array()) ids = ids && e.is_int();
    if (!ids) f.bad(key, "a token id or a list of them");
    c.token_ids.set(key, *id);
  }
  return c;
}

LlamaConfig read_llama_fields(const ConfigFields& f, const std::string& architecture, int64_t vocab, double eps) {
  LlamaConfig defaults;
  defaults.architecture = architecture;
  defaults.vocab_size = vocab;
  defaults.hidden_size = 4096;
  defaults.intermediate_size = 11008;
  defaults.num_hidden_layers = 32;
  defaults.num_attention_heads = 32;
  defaults.max_position_embeddings = 2048;
  defaults.rms_norm_eps = eps;
  return read_llama_fields(f, defaults);
}

namespace {

// transformers' Llama-like attention rotates whole heads (Phi-3's rotates a part: nn/models/phi3_config.cpp).
ModelBuilder validated_whole_heads(const ConfigFields& f, const LlamaConfig& c) {
  refuse_partial_rotary(f, c.rope_scaling);
  return builder_of<LlamaForCausalLM>(validated(f, c));
}

ModelBuilder llama(const ConfigFields& f) {
  LlamaConfig c = read_llama_fields(f, "LlamaForCausalLM", 32000, 1e-6);
  c.attention_bias = f.boolean("attention_bias", false);
  c.mlp_bias = f.boolean("mlp_bias", false);
  return validated_whole_heads(f, c);
}

ModelBuilder mistral(const ConfigFields& f) {
  LlamaConfig c = read_llama_fields(f, "MistralForCausalLM", 32000, 1e-6);
  c.sliding_window = f.integer("sliding_window", 0, /*lo=*/0);
  return validated_whole_heads(f, c);
}

ModelBuilder qwen2(const ConfigFields& f) {
  LlamaConfig c = read_llama_fields(f, "Qwen2ForCausalLM", 151936, 1e-6);
  refuse_sliding_layers(f);
  c.qkv_bias = true;  // Qwen2's q/k/v_proj always have one, o_proj never
  return validated_whole_heads(f, c);
}

ModelBuilder qwen3(const ConfigFields& f) {
  LlamaConfig c = read_llama_fields(f, "Qwen3ForCausalLM", 151936, 1e-6);
  refuse_sliding_layers(f);
  c.attention_bias = f.boolean("attention_bias", false);
  c.qk_norm = true;
  return validated_whole_heads(f, c);
}

const std::vector<std::string> kTargets = {"q_proj", "k_proj", "v_proj", "o_proj"};
const std::vector<std::string> kIgnored = {".rotary_emb.inv_freq"};

}  // namespace

json::Value llama_fields_json(const LlamaConfig& c, json::Value v) {
  using json::Value;
  v.set("hidden_act", "silu")
      // Both spellings, so that transformers 4 and 5 read the same RoPE.
      .set("rope_theta", c.rope_theta)
      .set("rope_parameters", rope_json(c.rope_theta, c.rope_scaling))
      .set("rope_scaling", c.rope_scaling.rope_type == "default" ? Value() : rope_json(c.rope_theta, c.rope_scaling));
  for (size_t i = 0; i < c.token_ids.size(); ++i) v.set(c.token_ids.keys()[i], c.token_ids.values()[i]);
  return v;
}

json::Value LlamaForCausalLM::config_json() const {
  using json::Value;
  const LlamaConfig& c = config;
  const Architecture& arch = architecture();
  Value v = llama_fields_json(c, sized_config_json());
  if (arch.model_type == "llama") v.set("attention_bias", c.attention_bias).set("mlp_bias", c.mlp_bias);
  if (arch.model_type == "mistral") v.set("sliding_window", c.sliding_window ? Value(c.sliding_window) : Value());
  if (arch.model_type == "qwen2" || arch.model_type == "qwen3")
    v.set("use_sliding_window", false).set("sliding_window", Value());
  if (arch.model_type == "qwen3") v.set("attention_bias", c.attention_bias);
  return v;
}

extern const Architecture kLlamaArchitecture{.name = "LlamaForCausalLM", .model_type = "llama", .base_prefix = "model.",
    .embedding = "model.embed_tokens.weight", .ignored_suffixes = kIgnored, .lora_targets = kTargets, .parse = llama,
    .cuda_graph_validated = true};
extern const Architecture kMistralArchitecture{.name = "MistralForCausalLM", .model_type = "mistral", .base_prefix = "model.",
    .embedding = "model.embed_tokens.weight", .ignored_suffixes = kIgnored, .lora_targets = kTargets, .parse = mistral,
    .cuda_graph_validated = true};
extern const Architecture kQwen2Architecture{.name = "Qwen2ForCausalLM", .model_type = "qwen2", .base_prefix = "model.",
    .embedding = "model.embed_tokens.weight", .ignored_suffixes = kIgnored, .lora_targets = kTargets, .parse = qwen2,
    .cuda_graph_validated = true};
extern const Architecture kQwen3Architecture{.name = "Qwen3ForCausalLM", .model_type = "qwen3", .base_prefix = "model.",
    .embedding = "model.embed_tokens.weight", .ignored_suffixes = kIgnored, .lora_targets = kTargets, .parse = qwen3,
    .cuda_graph_validated = true};

}  // namespace tg::nn
