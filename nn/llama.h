// The Llama architecture with transformers' parameter names (LlamaForCausalLM), so checkpoints
// and peft adapters carry over. Mistral, Qwen2 / Qwen2.5 and Qwen3 are the same model with the
// options of LlamaConfig below (nn/llama_config.cpp reads and writes their config.json).
//
//   tg::manual_seed(0);
//   auto model = std::make_shared<tg::nn::LlamaForCausalLM>(tg::nn::LlamaConfig::tiny());
//   tg::Tensor logits = model->forward(ids);            // ids [B, T] int -> [B, T, vocab]
//   tg::Tensor loss = tg::nn::causal_lm_loss(logits, ids);
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/generator.h"
#include "nn/attention.h"
#include "nn/causal_lm.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/norm.h"
#include "nn/rotary.h"

namespace tg::nn {

struct LlamaConfig {
  std::string architecture = "LlamaForCausalLM";  // its registry entry (nn/architecture.h)
  int64_t vocab_size = 256;
  int64_t hidden_size = 128;
  int64_t intermediate_size = 344;
  int64_t num_hidden_layers = 4;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 0;  // 0: = num_attention_heads
  int64_t max_position_embeddings = 128;  // the rotary tables' length; the spec's "seq"
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;  // every Linear and embedding weight ~ N(0, 0.02)
  RopeScaling rope_scaling;
  int64_t attention_head_dim = 0;  // config.json's head_dim; 0: hidden_size / num_attention_heads
  bool attention_bias = false;     // biases on q/k/v/o_proj (Llama's attention_bias, Qwen3)
  bool qkv_bias = false;           // biases on q/k/v_proj only (Qwen2)
  bool mlp_bias = false;           // biases on gate/up/down_proj
  bool qk_norm = false;            // Qwen3: RMSNorm over each head of q and k (self_attn.q_norm / k_norm)
  int64_t sliding_window = 0;      // Mistral v0.1: > 0, each query sees this many keys back
  // config.json's bos / eos / pad_token_id as read, written back as they were (transformers makes
  // pad_token_id the embedding's padding_idx, and its defaults may lie outside a small vocabulary).
  json::Value token_ids = json::Value::object();

  int64_t head_dim() const { return attention_head_dim ? attention_head_dim : hidden_size / num_attention_heads; }
  int64_t kv_heads() const { return num_key_value_heads ? num_key_value_heads : num_attention_heads; }
  void validate() const;  // tg::Error naming the bad field
  // What LlamaForCausalLM(config).num_parameters() gives, without building it.
  int64_t num_parameters() const;

  // The spec's configurations.
  static LlamaConfig tiny();        // 256 / 128 / 4 layers / 4 heads / 344, seq 128
  static LlamaConfig small();       // 256 / 384 / 6 layers / 6 heads / 1024, seq 256
  static LlamaConfig bench_135m();  // 32000 / 768 / 12 layers / 12 heads / 2048, seq 1024
  // "tiny", "small", "bench-135m"; tg::Error for other names.
  static LlamaConfig by_name(const std::string& name);
};

class ConfigFields;
// config.json's fields every Llama-like family shares (sizes, RoPE, eps, tied head; hidden_act
// silu, no attention dropout), with the family's defaults for vocab_size and rms_norm_eps
// (nn/llama_config.cpp). tg::Error naming the field.
LlamaConfig read_llama_fields(const ConfigFields& f, const std::string& architecture, int64_t vocab, double eps);
// Those fields as config.json, for `arch` (its name and model_type), with the token ids as read.
json::Value llama_fields_json(const LlamaConfig& c, const Architecture& arch);

// One pre-norm block: h = x + self_attn(input_layernorm(x));
//                     out = h + mlp(post_attention_layernorm(h)).
class LlamaDecoderLayer : public Module {
 public:
  explicit LlamaDecoderLayer(const LlamaConfig& c, Generator& gen = default_generator());
  // cache: generation (nn/kv_cache.h); cos, sin may be per sequence [B, 1, T, head_dim];
  // position_ids: packed rows (CausalSelfAttention::forward).
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache = nullptr,
                 const Tensor& position_ids = Tensor());
  // The same layer on x = residual + delta (delta undefined: x = residual), its output h + m left
  // as {h, m}: LlamaModel's next norm adds the two in its kernel (fused_add_rms_norm), so no
  // residual add runs on its own.
  std::pair<Tensor, Tensor> forward_unsummed(const Tensor& residual, const Tensor& delta, const Tensor& cos,
                                             const Tensor& sin, const LayerCache* cache = nullptr,
                                             const Tensor& position_ids = Tensor());

  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<CausalSelfAttention> self_attn;
  std::shared_ptr<SwiGLUMLP> mlp;
};

// Embeddings, blocks and the final norm: ids [B, T] -> hidden states [B, T, hidden].
class LlamaModel : public Module {
 public:
  explicit LlamaModel(const LlamaConfig& c, Generator& gen = default_generator());
  Tensor forward(const Tensor& ids) override { return forward(ids, Tensor()); }
  // Packed rows: position_ids [B, T] (CausalLM::hidden_states; undefined: 0..T-1 in every row).
  Tensor forward(const Tensor& ids, const Tensor& position_ids);
  // Generation: ids [B, T] continue the sequences of `cache`, their keys and values join it
  // (under NoGradGuard; nn/kv_cache.h); hidden states [B, T, hidden].
  Tensor forward(const Tensor& ids, KVCache& cache);
  // With gradient_checkpointing_enable(), each layer runs under tg::checkpoint while training.
  bool supports_gradient_checkpointing() const override { return true; }

  LlamaConfig config;
  std::shared_ptr<Embedding> embed_tokens;
  std::shared_ptr<ModuleList<LlamaDecoderLayer>> layers;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<RotaryEmbedding> rotary_emb;  // buffers only, not in the state dict
};

// forward(ids [B, T] int32/int64) -> logits [B, T, vocab]; loss(ids, labels): nn/causal_lm.h.
class LlamaForCausalLM : public CausalLM {
 public:
  explicit LlamaForCausalLM(const LlamaConfig& c, Generator& gen = default_generator());
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
  std::shared_ptr<LlamaModel> model;
};

}  // namespace tg::nn
