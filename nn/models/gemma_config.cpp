// config.json of Gemma2ForCausalLM and Gemma3ForCausalLM (model_type gemma3_text), read into and
// written from GemmaConfig, with their registry entries. What would change the computation in a way
// not implemented is refused by name.
#include <cmath>
#include <string>

#include "nn/models/architecture.h"
#include "nn/models/config_fields.h"
#include "nn/models/gemma.h"

namespace tg::nn {
namespace {

// A soft-capping field: absent takes the family's default, null turns it off.
double softcap(const ConfigFields& f, const std::string& key, double fallback) {
  const json::Value* v = f.json().find(key);
  if (v && v->is_null()) return 0;
  return f.number(key, fallback);
}

// layer_types as given, else transformers' default: every `pattern`-th layer global, the rest sliding.
std::vector<std::string> gemma_layer_types(const ConfigFields& f, int64_t layers, int64_t pattern) {
  std::vector<std::string> types = read_layer_types(f, layers);
  if (!types.empty()) return types;
  for (int64_t i = 0; i < layers; ++i) types.push_back((i + 1) % pattern ? "sliding_attention" : "full_attention");
  return types;
}

GemmaConfig read_gemma(const ConfigFields& f, const std::string& architecture, bool gemma3) {
  GemmaConfig c;
  c.architecture = architecture;
  c.vocab_size = f.integer("vocab_size", gemma3 ? 262208 : 256000);
  c.hidden_size = f.integer("hidden_size", 2304);
  c.intermediate_size = f.integer("intermediate_size", 9216);
  c.num_hidden_layers = f.integer("num_hidden_layers", 26, 1, kMaxLayers);
  c.num_attention_heads = f.integer("num_attention_heads", 8);
  c.num_key_value_heads = f.integer("num_key_value_heads", 4);
  c.head_dim = f.integer("head_dim", 256);
  c.max_position_embeddings = f.integer("max_position_embeddings", gemma3 ? 131072 : 8192, 1, kMaxContext);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.initializer_range = f.number("initializer_range", 0.02);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  c.attention_bias = f.boolean("attention_bias", false);
  c.query_pre_attn_scalar = f.number("query_pre_attn_scalar", 256, /*lo=*/1e-300);
  c.attn_logit_softcapping = softcap(f, "attn_logit_softcapping", gemma3 ? 0.0 : 50.0);
  c.final_logit_softcapping = softcap(f, "final_logit_softcapping", gemma3 ? 0.0 : 30.0);
  c.sliding_window = f.integer("sliding_window", 4096);
  const int64_t pattern = f.integer(f.get("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern",
                                    gemma3 ? 6 : 2);
  c.layer_types = gemma_layer_types(f, c.num_hidden_layers, pattern);
  c.qk_norm = gemma3;
  if (f.string("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh")
    f.unsupported("hidden_activation", "wants \"gelu_pytorch_tanh\"");
  if (f.probability("attention_dropout", 0.0) != 0.0) f.unsupported("attention_dropout", "wants 0.0");
  if (f.boolean("use_bidirectional_attention", false))
    f.unsupported("use_bidirectional_attention", "wants false: the models are causal");

  // RoPE: Gemma 2 one for every layer; Gemma 3 rope_theta (scaled by rope_scaling) for the global
  // layers and rope_local_base_freq for the sliding ones, which transformers 5 writes as
  // rope_parameters {"full_attention": {...}, "sliding_attention": {...}}.
  c.rope_theta = f.number("rope_theta", gemma3 ? 1e6 : 1e4, /*lo=*/1e-300);
  if (const json::Value* r = f.get("rope_scaling")) read_rope(f, "rope_scaling", *r, c.rope_theta, c.rope_scaling, c.max_position_embeddings);
  c.rope_local_base_freq = gemma3 ? f.number("rope_local_base_freq", 1e4, /*lo=*/1e-300) : c.rope_theta;
  if (const json::Value* r = f.get("rope_parameters")) {
    const json::Value *full = r->is_object() ? r->find("full_attention") : nullptr,
                      *sliding = r->is_object() ? r->find("sliding_attention") : nullptr;
    if (full || sliding) {
      if (full) read_rope(f, "rope_parameters.full_attention", *full, c.rope_theta, c.rope_scaling, c.max_position_embeddings);
      if (sliding)
        read_rope(f, "rope_parameters.sliding_attention", *sliding, c.rope_local_base_freq, c.rope_local_scaling,
                  c.max_position_embeddings);
    } else {
      read_rope(f, "rope_parameters", *r, c.rope_theta, c.rope_scaling, c.max_position_embeddings);
    }
  }
  refuse_partial_rotary(f, c.rope_scaling);
  refuse_partial_rotary(f, c.rope_local_scaling);
  if (!gemma3) {  // one RoPE for both kinds of layer
    c.rope_local_base_freq = c.rope_theta;
    c.rope_local_scaling = c.rope_scaling;
  }
  return validated(f, c);
}

ModelBuilder gemma2(const ConfigFields& f) { return builder_of<GemmaForCausalLM>(read_gemma(f, "Gemma2ForCausalLM", false)); }
ModelBuilder gemma3(const ConfigFields& f) { return builder_of<GemmaForCausalLM>(read_gemma(f, "Gemma3ForCausalLM", true)); }

json::Value optional_number(double v) { return v > 0 ? json::Value(v) : json::Value(); }

const std::vector<std::string> kTargets = {"q_proj", "k_proj", "v_proj", "o_proj"};
const std::vector<std::string> kIgnored = {".rotary_emb.inv_freq", ".rotary_emb_local.inv_freq"};

}  // namespace

json::Value GemmaForCausalLM::config_json() const {
  using json::Value;
  const GemmaConfig& c = config;
  const Architecture& arch = architecture();
  Value types = Value::array();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) types.push_back(c.is_sliding(i) ? "sliding_attention" : "full_attention");
  Value v = sized_config_json()
                .set("hidden_activation", "gelu_pytorch_tanh")
                .set("attention_bias", c.attention_bias)
                // an integer where it is one: transformers 5 validates the field as an int
                .set("query_pre_attn_scalar", c.query_pre_attn_scalar == std::floor(c.query_pre_attn_scalar)
                                                  ? Value(static_cast<int64_t>(c.query_pre_attn_scalar))
                                                  : Value(c.query_pre_attn_scalar))
                .set("attn_logit_softcapping", optional_number(c.attn_logit_softcapping))
                .set("final_logit_softcapping", optional_number(c.final_logit_softcapping))
                .set("sliding_window", c.sliding_window)
                .set("layer_types", types)
                // Both spellings of RoPE, so that transformers 4 and 5 read the same.
                .set("rope_theta", c.rope_theta);
  if (c.rope_scaling.rope_type != "default") v.set("rope_scaling", rope_json(c.rope_theta, c.rope_scaling));
  if (arch.model_type == "gemma2") return v.set("rope_parameters", rope_json(c.rope_theta, c.rope_scaling));
  return v.set("rope_local_base_freq", c.rope_local_base_freq)
      .set("rope_parameters", Value::object()
                                  .set("full_attention", rope_json(c.rope_theta, c.rope_scaling))
                                  .set("sliding_attention", rope_json(c.rope_local_base_freq, c.rope_local_scaling)));
}

extern const Architecture kGemma2Architecture{.name = "Gemma2ForCausalLM", .model_type = "gemma2", .base_prefix = "model.",
    .embedding = "model.embed_tokens.weight", .ignored_suffixes = kIgnored, .lora_targets = kTargets, .parse = gemma2,
    .cuda_graph_validated = true};
extern const Architecture kGemma3Architecture{.name = "Gemma3ForCausalLM", .model_type = "gemma3_text",
    .base_prefix = "model.", .embedding = "model.embed_tokens.weight", .ignored_suffixes = kIgnored,
    .lora_targets = kTargets, .parse = gemma3, .cuda_graph_validated = true};

}  // namespace tg::nn
