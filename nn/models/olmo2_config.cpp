// config.json of Olmo2ForCausalLM (OLMo 2), read into and written from LlamaConfig, and its registry
// entry. What would change the computation in a way not implemented is refused by name.
#include "nn/models/architecture.h"
#include "nn/models/config_fields.h"
#include "nn/models/olmo2.h"

namespace tg::nn {
namespace {

ModelBuilder olmo2(const ConfigFields& f) {
  LlamaConfig defaults;  // transformers' Olmo2Config
  defaults.architecture = "Olmo2ForCausalLM";
  defaults.vocab_size = 50304;
  defaults.hidden_size = 4096;
  defaults.intermediate_size = 11008;
  defaults.num_hidden_layers = 32;
  defaults.num_attention_heads = 32;
  defaults.max_position_embeddings = 2048;
  defaults.rms_norm_eps = 1e-5;
  LlamaConfig c = read_llama_fields(f, defaults);
  refuse_partial_rotary(f, c.rope_scaling);
  // transformers' Olmo2MLP has no bias whatever mlp_bias says, and its attention clips nothing (clip_qkv).
  c.attention_bias = f.boolean("attention_bias", false);
  return builder_of<Olmo2ForCausalLM>(validated(f, c));
}

}  // namespace

json::Value Olmo2ForCausalLM::config_json() const {
  return llama_fields_json(config, sized_config_json()).set("attention_bias", config.attention_bias);
}

extern const Architecture kOlmo2Architecture{.name = "Olmo2ForCausalLM", .model_type = "olmo2", .base_prefix = "model.",
    .embedding = "model.embed_tokens.weight", .ignored_suffixes = {".rotary_emb.inv_freq"},
    .lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj"}, .parse = olmo2, .cuda_graph_validated = false};

}  // namespace tg::nn
