// Gemma 2 and the Gemma 3 text model (Gemma2ForCausalLM, Gemma3ForCausalLM) on the decoder stack,
// with transformers' parameter names, so checkpoints and peft adapters carry over. What sets them
// apart from Llama: (1 + w) RMSNorms in float32, embeddings scaled by sqrt(hidden_size), GeGLU with
// tanh GELU, scores scaled by query_pre_attn_scalar^-0.5, sandwich norms (pre_feedforward_layernorm,
// post_feedforward_layernorm), sliding-window and global layers alternating (layer_types), Gemma 2's
// soft-capped scores and logits (tanh(s / cap) * cap), Gemma 3's own RoPE base for sliding layers
// and q/k norms. nn/models/gemma_config.cpp reads and writes their config.json.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "io/json.h"
#include "nn/models/decoder.h"
#include "nn/rotary.h"

namespace tg::nn {

struct GemmaConfig {
  std::string architecture = "Gemma2ForCausalLM";  // or "Gemma3ForCausalLM" (its registry entry)
  int64_t vocab_size = 256;
  int64_t hidden_size = 64;
  int64_t intermediate_size = 128;
  int64_t num_hidden_layers = 2;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 2;
  int64_t head_dim = 16;
  int64_t max_position_embeddings = 128;
  double rms_norm_eps = 1e-6;
  double initializer_range = 0.02;
  bool tie_word_embeddings = true;
  bool attention_bias = false;  // biases on q/k/v/o_proj
  double query_pre_attn_scalar = 16;  // the scores' scale is its -1/2 power
  double attn_logit_softcapping = 0;  // > 0: attention scores tanh(s / cap) * cap (Gemma 2: 50)
  double final_logit_softcapping = 0;  // > 0: the same on the logits (Gemma 2: 30)
  int64_t sliding_window = 16;  // the keys a sliding_attention layer's query sees
  // Per layer "sliding_attention" or "full_attention"; empty: sliding first, then alternating.
  std::vector<std::string> layer_types;
  bool qk_norm = false;  // Gemma 3: (1 + w) RMSNorm over each head of q and k
  double rope_theta = 10000.0;  // the full_attention layers' RoPE (every layer's in Gemma 2)
  RopeScaling rope_scaling;
  double rope_local_base_freq = 10000.0;  // the sliding_attention layers' (Gemma 3; Gemma 2: rope_theta)
  RopeScaling rope_local_scaling;

  bool is_sliding(int64_t layer) const;
  void validate() const;  // tg::Error naming the bad field
};

// The decoder stack's GemmaConfig (c.validate() first: tg::Error naming the bad field).
DecoderSpec gemma_spec(const GemmaConfig& c);

// forward(ids [B, T] int32/int64) -> logits [B, T, vocab] (soft-capped); loss: nn/models/causal_lm.h.
class GemmaForCausalLM : public DecoderForCausalLM {
 public:
  explicit GemmaForCausalLM(const GemmaConfig& c, Generator& gen = default_generator());
  json::Value config_json() const override;

  GemmaConfig config;
};

}  // namespace tg::nn
