// Phi-3 / Phi-3.5-mini with transformers' parameter names (Phi3ForCausalLM): Llama with fused
// projections, kept fused so that peft adapters on them carry over:
//   model.embed_tokens.weight, model.norm.weight, lm_head.weight,
//   model.layers.{i}.input_layernorm, .self_attn.qkv_proj (q, k, v rows in that order), .self_attn.o_proj,
//   .post_attention_layernorm, .mlp.gate_up_proj (gate rows, then up rows), .mlp.down_proj.
// The config is a LlamaConfig (architecture "Phi3ForCausalLM"); nn/phi3_config.cpp reads and
// writes its config.json.
#pragma once

#include <cstdint>
#include <memory>

#include "core/generator.h"
#include "nn/attention.h"
#include "nn/causal_lm.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/llama.h"
#include "nn/norm.h"
#include "nn/rotary.h"

namespace tg::nn {

// q, k, v from one qkv_proj, then CausalSelfAttention's attention (nn/attention.h), o_proj out.
class Phi3Attention : public Module {
 public:
  Phi3Attention(const LlamaConfig& c, Generator& gen = default_generator());
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache = nullptr,
                 const Tensor& position_ids = Tensor());

  int64_t num_heads;
  AttentionOptions options;  // num_kv_heads, head_dim, sliding_window
  std::shared_ptr<Linear> qkv_proj, o_proj;
};

// down_proj(silu(gate) * up), gate and up the two halves of gate_up_proj's output.
class Phi3MLP : public Module {
 public:
  Phi3MLP(int64_t hidden, int64_t intermediate, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;

  int64_t intermediate;
  std::shared_ptr<Linear> gate_up_proj, down_proj;
};

// Llama's pre-norm block with Phi-3's attention and MLP.
class Phi3DecoderLayer : public Module {
 public:
  explicit Phi3DecoderLayer(const LlamaConfig& c, Generator& gen = default_generator());
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache = nullptr,
                 const Tensor& position_ids = Tensor());

  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<Phi3Attention> self_attn;
  std::shared_ptr<Phi3MLP> mlp;
};

class Phi3Model : public Module {
 public:
  explicit Phi3Model(const LlamaConfig& c, Generator& gen = default_generator());
  Tensor forward(const Tensor& ids) override { return forward(ids, Tensor()); }
  // Packed rows: as LlamaModel's.
  Tensor forward(const Tensor& ids, const Tensor& position_ids);
  // Generation (nn/kv_cache.h), as LlamaModel's.
  Tensor forward(const Tensor& ids, KVCache& cache);
  bool supports_gradient_checkpointing() const override { return true; }

  LlamaConfig config;
  std::shared_ptr<Embedding> embed_tokens;
  std::shared_ptr<ModuleList<Phi3DecoderLayer>> layers;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<RotaryEmbedding> rotary_emb;  // buffers only
};

class Phi3ForCausalLM : public CausalLM {
 public:
  explicit Phi3ForCausalLM(const LlamaConfig& c, Generator& gen = default_generator());
  Tensor hidden_states(const Tensor& ids) override { return model->forward(ids); }
  Tensor hidden_states(const Tensor& ids, const Tensor& position_ids) override {
    return model->forward(ids, position_ids);
  }
  Tensor hidden_states(const Tensor& ids, KVCache& cache) override { return model->forward(ids, cache); }
  Embedding& input_embeddings() override { return *model->embed_tokens; }
  ModelDims dims() const override;
  const Architecture& architecture() const override;
  json::Value config_json() const override;

  LlamaConfig config;
  std::shared_ptr<Phi3Model> model;
};

}  // namespace tg::nn
