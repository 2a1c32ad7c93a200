// config.json of SmolLM3ForCausalLM, read into and written from SmolLM3Config, and its registry
// entry. What would change the computation in a way not implemented is refused by name.
#include <string>
#include <vector>

#include "nn/models/architecture.h"
#include "nn/models/config_fields.h"
#include "nn/models/smollm3.h"

namespace tg::nn {
namespace {

// no_rope_layers as given (1: RoPE, 0: none; SmolLM3Config::validate checks its length); empty when absent.
std::vector<int64_t> read_no_rope_layers(const ConfigFields& f) {
  std::vector<int64_t> out;
  const json::Value* v = f.get("no_rope_layers");
  if (!v) return out;
  const char* wanted = "a list of 1 (RoPE) or 0 (none), one per layer";
  if (!v->is_array()) f.bad("no_rope_layers", wanted);
  for (const json::Value& e : v->as_array()) {
    if (!e.is_int() || (e.as_int() != 0 && e.as_int() != 1)) f.bad("no_rope_layers", wanted);
    out.push_back(e.as_int());
  }
  return out;
}

ModelBuilder smollm3(const ConfigFields& f) {
  SmolLM3Config defaults;  // transformers' SmolLM3Config
  defaults.vocab_size = 128256;
  defaults.hidden_size = 2048;
  defaults.intermediate_size = 11008;
  defaults.num_hidden_layers = 36;
  defaults.num_attention_heads = 16;
  defaults.num_key_value_heads = 4;
  defaults.max_position_embeddings = 32768;
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 2e6;
  defaults.tie_word_embeddings = true;
  SmolLM3Config c;
  static_cast<LlamaConfig&>(c) = read_llama_fields(f, defaults);
  refuse_partial_rotary(f, c.rope_scaling);
  c.attention_bias = f.boolean("attention_bias", false);
  c.mlp_bias = f.boolean("mlp_bias", false);
  c.sliding_window = f.integer("sliding_window", 0, /*lo=*/0);  // null: none
  c.use_sliding_window = f.boolean("use_sliding_window", false);
  c.no_rope_layer_interval = f.integer("no_rope_layer_interval", 4);
  c.no_rope_layers = read_no_rope_layers(f);
  c.layer_types = read_layer_types(f, c.num_hidden_layers);
  return builder_of<SmolLM3ForCausalLM>(validated(f, c));
}

}  // namespace

json::Value SmolLM3ForCausalLM::config_json() const {
  const SmolLM3Config& c = config;
  json::Value rope = json::Value::array({}), types = json::Value::array({});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    rope.push_back(static_cast<int64_t>(c.uses_rope(i)));
    types.push_back(c.is_sliding(i) ? "sliding_attention" : "full_attention");
  }
  return llama_fields_json(c, sized_config_json())
      .set("attention_bias", c.attention_bias)
      .set("mlp_bias", c.mlp_bias)
      .set("use_sliding_window", c.use_sliding_window)
      .set("sliding_window", c.sliding_window ? json::Value(c.sliding_window) : json::Value())
      .set("no_rope_layers", rope)
      .set("no_rope_layer_interval", c.no_rope_layer_interval)
      .set("layer_types", types);
}

extern const Architecture kSmolLM3Architecture{.name = "SmolLM3ForCausalLM", .model_type = "smollm3",
    .base_prefix = "model.", .embedding = "model.embed_tokens.weight", .ignored_suffixes = {".rotary_emb.inv_freq"},
    .lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj"}, .parse = smollm3, .cuda_graph_validated = false};

}  // namespace tg::nn
