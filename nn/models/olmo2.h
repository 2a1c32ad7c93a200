// OLMo 2 (Olmo2ForCausalLM) with transformers' parameter names: Llama's blocks with the norms after
// the attention and the MLP instead of before them,
//   h = x + post_attention_layernorm(self_attn(x)); out = h + post_feedforward_layernorm(mlp(h)),
// and q_norm / k_norm over the whole q and k projections (num_heads * head_dim, num_kv_heads *
// head_dim) before the heads split. The config is a LlamaConfig (architecture "Olmo2ForCausalLM");
// nn/models/olmo2_config.cpp reads and writes its config.json.
#pragma once

#include "core/generator.h"
#include "io/json.h"
#include "nn/models/decoder.h"
#include "nn/models/llama.h"

namespace tg::nn {

// The decoder stack of an OLMo 2 LlamaConfig (attention_bias its only bias, no Qwen3 q/k norms, no
// sliding window): tg::Error naming the bad field.
DecoderSpec olmo2_spec(const LlamaConfig& c);

class Olmo2ForCausalLM : public DecoderForCausalLM {
 public:
  // c.architecture "LlamaForCausalLM" (LlamaConfig's default) is taken as "Olmo2ForCausalLM".
  explicit Olmo2ForCausalLM(const LlamaConfig& c, Generator& gen = default_generator());
  json::Value config_json() const override;

  LlamaConfig config;
};

}  // namespace tg::nn
