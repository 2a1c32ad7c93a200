#include "nn/models/smollm3.h"

namespace tg::nn {

bool SmolLM3Config::uses_rope(int64_t layer) const {
  if (no_rope_layers.empty()) return (layer + 1) % no_rope_layer_interval != 0;
  return no_rope_layers.at(static_cast<size_t>(layer)) != 0;
}

bool SmolLM3Config::is_sliding(int64_t layer) const {
  if (layer_types.empty()) return use_sliding_window && sliding_window > 0 && !uses_rope(layer);
  return layer_types.at(static_cast<size_t>(layer)) == "sliding_attention";
}

void SmolLM3Config::validate() const {
  LlamaConfig::validate();
  TG_CHECK(!qkv_bias && !qk_norm, "SmolLM3Config", "SmolLM3 has no q/k/v-only biases and no q/k norms "
           "(qkv_bias and qk_norm must be false)");
  TG_CHECK(no_rope_layer_interval > 0, "SmolLM3Config", "no_rope_layer_interval must be positive, got ",
           no_rope_layer_interval);
  TG_CHECK(no_rope_layers.empty() || static_cast<int64_t>(no_rope_layers.size()) >= num_hidden_layers, "SmolLM3Config",
           "no_rope_layers has ", no_rope_layers.size(), " entries, wants one per layer (num_hidden_layers ",
           num_hidden_layers, ")");
  for (int64_t v : no_rope_layers)
    TG_CHECK(v == 0 || v == 1, "SmolLM3Config", "no_rope_layers holds ", v, ", wants 1 (RoPE) or 0 (none)");
  TG_CHECK(layer_types.empty() || static_cast<int64_t>(layer_types.size()) == num_hidden_layers, "SmolLM3Config",
           "layer_types has ", layer_types.size(), " entries for num_hidden_layers ", num_hidden_layers);
  for (const std::string& t : layer_types)
    TG_CHECK(t == "sliding_attention" || t == "full_attention", "SmolLM3Config", "layer_types entry \"", t,
             "\" is neither \"sliding_attention\" nor \"full_attention\"");
  // transformers' attention slides only with use_sliding_window, its mask whenever layer_types says:
  // a sliding layer without both is computed two ways there, so it is refused.
  for (int64_t i = 0; i < num_hidden_layers; ++i)
    TG_CHECK(!is_sliding(i) || (use_sliding_window && sliding_window > 0), "SmolLM3Config", "layer ", i,
             " is a sliding_attention layer, so use_sliding_window must be true and sliding_window positive, got ",
             use_sliding_window ? "true" : "false", " and ", sliding_window);
}

DecoderSpec smollm3_spec(const SmolLM3Config& c) {
  c.validate();
  DecoderSpec s = llama_spec(c);
  s.family = "SmolLM3";
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    s.rope_layers.push_back(c.uses_rope(i));
    s.sliding_layers.push_back(c.is_sliding(i));
  }
  return s;
}

SmolLM3ForCausalLM::SmolLM3ForCausalLM(const SmolLM3Config& c, Generator& gen)
    : DecoderForCausalLM(smollm3_spec(c), gen), config(c) {}

}  // namespace tg::nn
