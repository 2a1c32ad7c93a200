// The decoder stack of the Llama-like families (transformers' LlamaModel and the models written
// after it): token embeddings, pre-norm blocks of attention and gated MLP, a final RMSNorm, RoPE,
// with transformers' parameter names (model.embed_tokens, model.layers.{i}.self_attn.q_proj, ...,
// model.norm, lm_head). A family (nn/models/llama.h, gemma.h, phi3.h, smollm3.h, olmo2.h) is its
// config, the DecoderSpec it makes of it, its config.json and its registry entry; the stack does the
// rest: KV caches, packed rows (position_ids), sliding windows, gradient checkpointing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/limits.h"
#include "io/json.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/moe.h"
#include "nn/models/causal_lm.h"
#include "nn/norm.h"
#include "nn/rotary.h"

namespace tg::nn {

// What the families of the stack differ in. The defaults are Llama's.
struct DecoderSpec {
  std::string architecture;  // the registry entry (nn/models/architecture.h)
  std::string family;        // the modules' names: <family>ForCausalLM, <family>Model, <family>DecoderLayer
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0, num_attention_heads = 0;
  int64_t max_position_embeddings = 0;  // the RoPE tables' length
  double rms_norm_eps = 1e-5;
  double initializer_range = 0.02;  // every Linear and embedding weight ~ N(0, initializer_range)
  bool tie_word_embeddings = false;
  AttentionOptions attention;  // num_kv_heads and head_dim given; sliding_window: the sliding layers'
  std::vector<bool> sliding_layers;  // which layers use attention.sliding_window; empty: all of them
  std::vector<bool> rope_layers;     // which layers rotate q and k (SmolLM3's no_rope_layers); empty: all of them
  GatedMLPOptions mlp;
  struct Rope {
    double theta = 10000.0;
    RopeScaling scaling;
  };
  Rope rope;
  std::optional<Rope> local_rope;  // the sliding layers' own RoPE (Gemma); none: rope
  bool unit_offset_norms = false;  // Gemma: every RMSNorm (1 + w) in float32 (nn/norm.h)
  bool sandwich_norms = false;     // Gemma: the attention's and the MLP's outputs normed too (DecoderLayer)
  bool pre_norms = true;           // false (OLMo 2): their inputs not normed, only sandwich_norms' outputs
  bool scale_embeddings = false;   // Gemma: the embeddings times sqrt(hidden_size), rounded to their dtype
  double final_logit_softcapping = 0;  // > 0: logits tanh(l / cap) * cap
  // Mixture of experts (Qwen3-MoE, Mixtral, gpt-oss): the sparse layers' MLP is a SparseMoeBlock,
  // the others' the GatedMLP of intermediate_size.
  struct Moe {
    MoeOptions block;
    std::vector<bool> sparse_layers;    // empty: every layer
    bool output_router_logits = false;  // loss() adds router_aux_loss_coef x the load-balancing loss
    double router_aux_loss_coef = 0.001;
  };
  std::optional<Moe> moe;

  bool is_sliding(int64_t layer) const;
  bool is_sparse(int64_t layer) const;
  bool uses_rope(int64_t layer) const;
  void validate() const;  // tg::Error naming the bad field
};

// tg::Error naming `who` and the field unless the sizes the families' configs name alike are positive.
template <class Config>
void check_sizes(const Config& c, const char* who) {
  const std::pair<int64_t, const char*> sizes[] = {
      {c.vocab_size, "vocab_size"}, {c.hidden_size, "hidden_size"}, {c.intermediate_size, "intermediate_size"},
      {c.num_hidden_layers, "num_hidden_layers"}, {c.num_attention_heads, "num_attention_heads"},
      {c.max_position_embeddings, "max_position_embeddings"}};
  for (const auto& [v, name] : sizes) TG_CHECK(v > 0, who, name, " must be positive, got ", v);
  TG_CHECK(c.num_hidden_layers <= kMaxLayers, who, "num_hidden_layers ", c.num_hidden_layers, " is above ", kMaxLayers,
           ", the most tapegrad builds");
  TG_CHECK(c.max_position_embeddings <= kMaxContext, who, "max_position_embeddings ", c.max_position_embeddings,
           " is above ", kMaxContext, ", the longest context tapegrad builds (its RoPE tables hold every position)");
}

// A spec with the fields the families' configs name alike (transformers' names); the family sets
// the rest.
template <class Config>
DecoderSpec sized_spec(const Config& c, const char* family) {
  DecoderSpec s;
  s.architecture = c.architecture;
  s.family = family;
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.intermediate_size = c.intermediate_size;
  s.num_hidden_layers = c.num_hidden_layers;
  s.num_attention_heads = c.num_attention_heads;
  s.max_position_embeddings = c.max_position_embeddings;
  s.rms_norm_eps = c.rms_norm_eps;
  s.initializer_range = c.initializer_range;
  s.tie_word_embeddings = c.tie_word_embeddings;
  s.rope = {c.rope_theta, c.rope_scaling};
  return s;
}

// One pre-norm block: h = x + self_attn(input_layernorm(x)); out = h + mlp(post_attention_layernorm(h)).
// With sandwich_norms: h = x + post_attention_layernorm(self_attn(input_layernorm(x)));
//                   out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))).
// Without pre_norms too: h = x + post_attention_layernorm(self_attn(x));
//                      out = h + post_feedforward_layernorm(mlp(h)).
class DecoderLayer : public Module {
 public:
  DecoderLayer(const DecoderSpec& s, int64_t index, Generator& gen = default_generator());
  using Module::forward;  // not hidden by the overloads below (clang's -Woverloaded-virtual)
  // cache: generation (nn/generation/kv_cache.h); cos, sin may be per sequence [B, 1, T, head_dim];
  // position_ids: packed rows (CausalSelfAttention::forward).
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache = nullptr,
                 const Tensor& position_ids = Tensor());
  // The same layer on x = residual + delta (delta undefined: x = residual), its output h + m left
  // as {h, m}: the next layer's norm adds the two in its kernel (fused_add_rms_norm), so no
  // residual add runs on its own.
  std::pair<Tensor, Tensor> forward_unsummed(const Tensor& residual, const Tensor& delta, const Tensor& cos,
                                             const Tensor& sin, const LayerCache* cache = nullptr,
                                             const Tensor& position_ids = Tensor());

  bool sliding;  // its attention has the sliding window (and the local RoPE where there is one)
  bool rope;     // its attention rotates q and k
  std::shared_ptr<RMSNorm> input_layernorm;  // pre_norms only
  std::shared_ptr<RMSNorm> post_attention_layernorm;
  std::shared_ptr<RMSNorm> pre_feedforward_layernorm;   // sandwich_norms with pre_norms only
  std::shared_ptr<RMSNorm> post_feedforward_layernorm;  // sandwich_norms only
  std::shared_ptr<CausalSelfAttention> self_attn;
  std::shared_ptr<GatedMLP> mlp;               // a dense layer's, registered as "mlp"
  std::shared_ptr<SparseMoeBlock> sparse_mlp;  // a sparse layer's (DecoderSpec::moe), registered as "mlp"

 private:
  Tensor feed_forward(const Tensor& x);  // the MLP, dense or sparse
};

// Embeddings, blocks and the final norm: ids [B, T] -> hidden states [B, T, hidden].
class DecoderModel : public Module {
 public:
  explicit DecoderModel(const DecoderSpec& s, Generator& gen = default_generator());
  Tensor forward(const Tensor& ids) override { return forward(ids, Tensor()); }
  // Packed rows: position_ids [B, T] (CausalLM::hidden_states; undefined: 0..T-1 in every row).
  Tensor forward(const Tensor& ids, const Tensor& position_ids);
  // Generation: ids [B, T] continue the sequences of `cache`, their keys and values join it
  // (under NoGradGuard; nn/generation/kv_cache.h); hidden states [B, T, hidden].
  Tensor forward(const Tensor& ids, KVCache& cache);
  // With gradient_checkpointing_enable(), each layer runs under tg::checkpoint while training.
  bool supports_gradient_checkpointing() const override { return true; }

  DecoderSpec spec;
  std::shared_ptr<Embedding> embed_tokens;
  std::shared_ptr<ModuleList<DecoderLayer>> layers;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<RotaryEmbedding> rotary_emb;        // buffers only, not in the state dict
  std::shared_ptr<RotaryEmbedding> rotary_emb_local;  // local_rope only

 private:
  Tensor embed(const Tensor& ids) const;
};

// The stack with its head: forward(ids [B, T] int32/int64) -> logits [B, T, vocab]; loss:
// nn/models/causal_lm.h. Weights drawn as transformers' _init_weights draws them, in module order from
// `gen`. A family derives from it with its config and config_json.
class DecoderForCausalLM : public CausalLM {
 public:
  DecoderForCausalLM(const DecoderSpec& s, Generator& gen);
  Tensor hidden_states(const Tensor& ids) override { return model->forward(ids); }
  Tensor hidden_states(const Tensor& ids, const Tensor& position_ids) override {
    return model->forward(ids, position_ids);
  }
  Tensor hidden_states(const Tensor& ids, KVCache& cache) override { return model->forward(ids, cache); }
  // The head, then final_logit_softcapping.
  Tensor logits(const Tensor& hidden) override;
  // CausalLM's loss, plus router_aux_loss_coef x the load-balancing loss when output_router_logits.
  Tensor loss(const Tensor& ids, const Tensor& labels, const Tensor& position_ids = Tensor()) override;
  Embedding& input_embeddings() override { return *model->embed_tokens; }
  ModelDims dims() const override;
  const Architecture& architecture() const override;
  // transformers' load_balancing_loss_func over the sparse layers' router stats of the last forward
  // (kept while keep_router_stats(true); loss() keeps them itself when output_router_logits).
  Tensor load_balancing_loss() const;
  void keep_router_stats(bool on);

  std::shared_ptr<DecoderModel> model;

 protected:
  // Not with final soft-capping: the losses take the capped logits.
  bool logits_are_head_product() const override;
  // config.json's fields every family of the stack writes alike: architectures, model_type, the
  // sizes, rms_norm_eps, initializer_range, tie_word_embeddings, attention_dropout 0.
  json::Value sized_config_json() const;
};

}  // namespace tg::nn
