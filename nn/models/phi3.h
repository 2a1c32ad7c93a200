// Phi-3 / Phi-3.5-mini with transformers' parameter names (Phi3ForCausalLM): Llama with fused
// projections, kept fused so that peft adapters on them carry over:
//   model.layers.{i}.self_attn.qkv_proj (q, k, v rows in that order), .mlp.gate_up_proj (gate rows,
//   then up rows); the rest as Llama's (nn/models/decoder.h).
// The config is a LlamaConfig (architecture "Phi3ForCausalLM"); nn/models/phi3_config.cpp reads and
// writes its config.json.
#pragma once

#include "core/generator.h"
#include "io/json.h"
#include "nn/models/decoder.h"
#include "nn/models/llama.h"

namespace tg::nn {

// The decoder stack of a Phi-3 LlamaConfig (no biases, no q/k norms): tg::Error naming the bad field.
DecoderSpec phi3_spec(const LlamaConfig& c);

class Phi3ForCausalLM : public DecoderForCausalLM {
 public:
  // c.architecture "LlamaForCausalLM" (LlamaConfig's default) is taken as "Phi3ForCausalLM".
  explicit Phi3ForCausalLM(const LlamaConfig& c, Generator& gen = default_generator());
  json::Value config_json() const override;

  LlamaConfig config;
};

}  // namespace tg::nn
