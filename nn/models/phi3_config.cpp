// config.json of Phi3ForCausalLM (Phi-3, Phi-3.5-mini), read into and written from LlamaConfig, and
// its registry entry. What would change the computation in a way not implemented is refused by name.
#include <string>

#include "nn/models/architecture.h"
#include "nn/models/config_fields.h"
#include "nn/models/gguf.h"
#include "nn/models/phi3.h"

namespace tg::nn {
namespace {

// The RoPE types that read original_max_position_embeddings.
bool uses_original_context(const RopeScaling& s) {
  return s.rope_type == "llama3" || s.rope_type == "yarn" || s.rope_type == "longrope";
}

ModelBuilder phi3(const ConfigFields& f) {
  // read_llama_fields reads RoPE (longrope: Phi-3-128k, Phi-3.5) and partial_rotary_factor (Phi-4-mini).
  LlamaConfig c = read_llama_fields(f, "Phi3ForCausalLM", 32064, 1e-5);
  c.sliding_window = f.integer("sliding_window", 0, /*lo=*/0);  // null: none
  // Phi3Config always has original_max_position_embeddings (default 4096), which transformers
  // prefers to rope_parameters' (standardize_rope_params).
  if (uses_original_context(c.rope_scaling) && !f.get("original_max_position_embeddings"))
    c.rope_scaling.original_max_position_embeddings = 4096;
  if (f.probability("resid_pdrop", 0.0) != 0.0) f.unsupported("resid_pdrop", "wants 0.0");
  // embd_pdrop is in Phi-3's config.json, but transformers' Phi3Model applies no embedding dropout.
  return builder_of<Phi3ForCausalLM>(validated(f, c));
}

}  // namespace

// nn/models/phi3_gguf.cpp
GgufModel phi3_gguf(const CausalLM& model);

json::Value Phi3ForCausalLM::config_json() const {
  using json::Value;
  const LlamaConfig& c = config;
  const RopeScaling& s = c.rope_scaling;
  return llama_fields_json(c, sized_config_json())
      .set("original_max_position_embeddings",
           uses_original_context(s) ? s.original_max_position_embeddings : c.max_position_embeddings)
      .set("embd_pdrop", 0.0)
      .set("resid_pdrop", 0.0)
      .set("sliding_window", c.sliding_window ? Value(c.sliding_window) : Value())
      .set("partial_rotary_factor", s.partial_rotary_factor)
      .set("rope_parameters", rope_json(c.rope_theta, s).set("partial_rotary_factor", s.partial_rotary_factor));
}

extern const Architecture kPhi3Architecture{.name = "Phi3ForCausalLM", .model_type = "phi3", .base_prefix = "model.",
    .embedding = "model.embed_tokens.weight", .ignored_suffixes = {".rotary_emb.inv_freq"},
    .lora_targets = {},  // peft's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING has no phi3: name them
    .parse = phi3, .gguf = phi3_gguf, .cuda_graph_validated = true};

}  // namespace tg::nn
