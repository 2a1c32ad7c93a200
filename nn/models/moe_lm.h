// The mixture-of-experts families on the decoder stack (nn/models/decoder.h), transformers'
// Qwen3MoeForCausalLM, MixtralForCausalLM and GptOssForCausalLM: Llama's blocks whose MLP is a
// SparseMoeBlock (nn/moe.h) in every sparse layer. One config for the three, as LlamaConfig is
// Llama's, Mistral's and Qwen's (nn/models/moe_lm_config.cpp reads and writes their config.json).
//   Qwen3-MoE: Qwen3's attention (q/k norms), softmax-then-top-k routing renormalised by
//     norm_topk_prob, experts of moe_intermediate_size, dense layers by mlp_only_layers and
//     decoder_sparse_step.
//   Mixtral:   Mistral's attention, top-2 routing renormalised, experts of intermediate_size.
//   gpt-oss:   biased attention with sinks, sliding and full layers by layer_types, YaRN RoPE, a
//     biased router (top-k of the logits, softmax over them) and clamped SwiGLU experts with biases
//     (clamped at 7.0 whatever swiglu_limit says, as transformers).
// The load-balancing loss joins loss() when output_router_logits (router_aux_loss_coef times it).
#pragma once

#include <cstdint>
#include <vector>

#include "core/generator.h"
#include "io/json.h"
#include "nn/models/decoder.h"
#include "nn/models/llama.h"

namespace tg::nn {

struct MoeConfig {
  // architecture (Qwen3MoeForCausalLM, MixtralForCausalLM, GptOssForCausalLM), sizes, RoPE,
  // attention biases, head_dim, q/k norms, sliding_window, token ids: as Llama's
  LlamaConfig base;
  int64_t num_experts = 8;  // num_experts (Qwen3-MoE) or num_local_experts
  int64_t num_experts_per_tok = 2;
  int64_t moe_intermediate_size = 0;     // the experts' width; 0: intermediate_size (Mixtral, gpt-oss)
  bool norm_topk_prob = true;            // Qwen3-MoE's; Mixtral always renormalises
  int64_t decoder_sparse_step = 1;       // Qwen3-MoE: layer i is sparse when (i + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;  // ... and it is not listed here
  int64_t max_window_layers = 0;         // Qwen3-MoE's, read and written back (no window is used)
  bool output_router_logits = false;
  double router_aux_loss_coef = 0.001;
  std::vector<bool> sliding_layers;                 // gpt-oss's layer_types: true for "sliding_attention"
  // gpt-oss's config.json values, read and written back; its experts use transformers' constants
  // (alpha 1.702, limit 7.0) whatever these say, as transformers 5.17's GptOssExperts does
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;

  int64_t expert_intermediate_size() const {
    return moe_intermediate_size ? moe_intermediate_size : base.intermediate_size;
  }
  bool is_sparse(int64_t layer) const;
  void validate() const;  // tg::Error naming the bad field
};

// The decoder stack's MoeConfig (c.validate() first).
DecoderSpec moe_spec(const MoeConfig& c);

class MoeForCausalLM : public DecoderForCausalLM {
 public:
  explicit MoeForCausalLM(const MoeConfig& c, Generator& gen = default_generator());
  json::Value config_json() const override;

  MoeConfig config;
};

}  // namespace tg::nn
