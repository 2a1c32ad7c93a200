#include "nn/models/gemma.h"

#include <cmath>

namespace tg::nn {

bool GemmaConfig::is_sliding(int64_t layer) const {
  return layer_types.empty() ? layer % 2 == 0 : layer_types.at(static_cast<size_t>(layer)) == "sliding_attention";
}

void GemmaConfig::validate() const {
  check_sizes(*this, "GemmaConfig");
  TG_CHECK(num_key_value_heads > 0, "GemmaConfig", "num_key_value_heads must be positive, got ", num_key_value_heads);
  TG_CHECK(head_dim > 0, "GemmaConfig", "head_dim must be positive, got ", head_dim);
  TG_CHECK(num_attention_heads % num_key_value_heads == 0, "GemmaConfig", "num_key_value_heads ",
           num_key_value_heads, " must divide num_attention_heads ", num_attention_heads);
  TG_CHECK(head_dim % 2 == 0, "GemmaConfig", "head_dim ", head_dim, " must be even for rotary embedding");
  TG_CHECK(std::isfinite(query_pre_attn_scalar) && query_pre_attn_scalar > 0, "GemmaConfig",
           "query_pre_attn_scalar must be a positive number, got ", query_pre_attn_scalar);
  TG_CHECK(std::isfinite(attn_logit_softcapping) && attn_logit_softcapping >= 0, "GemmaConfig",
           "attn_logit_softcapping must be >= 0 (0: none), got ", attn_logit_softcapping);
  TG_CHECK(std::isfinite(final_logit_softcapping) && final_logit_softcapping >= 0, "GemmaConfig",
           "final_logit_softcapping must be >= 0 (0: none), got ", final_logit_softcapping);
  TG_CHECK(layer_types.empty() || static_cast<int64_t>(layer_types.size()) == num_hidden_layers, "GemmaConfig",
           "layer_types has ", layer_types.size(), " entries for num_hidden_layers ", num_hidden_layers);
  for (const std::string& t : layer_types)
    TG_CHECK(t == "sliding_attention" || t == "full_attention", "GemmaConfig", "layer_types entry \"", t,
             "\" is neither \"sliding_attention\" nor \"full_attention\"");
  for (int64_t i = 0; i < num_hidden_layers; ++i)
    TG_CHECK(!is_sliding(i) || sliding_window > 0, "GemmaConfig", "layer ", i,
             " is a sliding_attention layer, so sliding_window must be positive, got ", sliding_window);
  rope_scaling.validate(head_dim, max_position_embeddings, rope_theta);
  rope_local_scaling.validate(head_dim, max_position_embeddings, rope_local_base_freq, "rope_local_base_freq");
}

DecoderSpec gemma_spec(const GemmaConfig& c) {
  c.validate();
  DecoderSpec s = sized_spec(c, "Gemma");
  s.attention = {.num_kv_heads = c.num_key_value_heads, .head_dim = c.head_dim, .qkv_bias = c.attention_bias,
                 .o_bias = c.attention_bias, .qk_norm = c.qk_norm, .qk_norm_eps = c.rms_norm_eps,
                 .sliding_window = c.sliding_window, .scale = 1.0 / std::sqrt(c.query_pre_attn_scalar),
                 .softcap = c.attn_logit_softcapping, .qk_norm_unit_offset = true};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) s.sliding_layers.push_back(c.is_sliding(i));
  s.mlp.activation = GatedMLPOptions::Activation::GELUTanh;
  s.local_rope = DecoderSpec::Rope{c.rope_local_base_freq, c.rope_local_scaling};
  s.unit_offset_norms = s.sandwich_norms = s.scale_embeddings = true;
  s.final_logit_softcapping = c.final_logit_softcapping;
  return s;
}

GemmaForCausalLM::GemmaForCausalLM(const GemmaConfig& c, Generator& gen)
    : DecoderForCausalLM(gemma_spec(c), gen), config(c) {}

}  // namespace tg::nn
