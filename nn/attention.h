// Multi-head causal self-attention layers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "core/generator.h"
#include "nn/dropout.h"
#include "nn/generation/kv_cache.h"
#include "nn/linear.h"
#include "nn/norm.h"

namespace tg::nn {

// What the Llama-like families change in their attention.
struct AttentionOptions {
  int64_t num_kv_heads = 0;  // 0: num_heads
  int64_t head_dim = 0;      // 0: hidden / num_heads (Qwen3, Mistral-Nemo give another)
  bool qkv_bias = false;     // Qwen2; Llama's attention_bias sets both
  bool o_bias = false;
  bool qk_norm = false;      // Qwen3: an RMSNorm over each head of q and of k, before RoPE
  bool qk_norm_whole = false;  // OLMo 2: qk_norm's over the whole of q and of k, before the heads split
  double qk_norm_eps = 1e-6;
  int64_t sliding_window = 0;  // > 0: query i sees keys i - window < j <= i (Mistral v0.1, Gemma's sliding layers)
  std::optional<double> scale = std::nullopt;  // the scores' scale; default 1 / sqrt(head_dim) (Gemma: query_pre_attn_scalar^-0.5)
  // > 0: scores s become tanh(s / softcap) * softcap before the mask (Gemma 2's attn_logit_softcapping);
  // the attention kernels have no soft-capping, so these layers compose it from matmul, tanh and softmax.
  double softcap = 0;
  bool qk_norm_unit_offset = false;  // q_norm / k_norm are Gemma's (1 + w) RMSNorm (nn/norm.h)
  bool fused_qkv = false;  // Phi-3: one qkv_proj, q rows then k rows then v rows
};

// Llama attention: q/k/v/o projections (or one qkv_proj: Phi-3), rotary embedding on q and k,
// grouped-query heads (num_kv_heads divides num_heads; each kv head serves num_heads / num_kv_heads
// query heads).
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t hidden, int64_t num_heads, int64_t num_kv_heads = 0 /* = num_heads */,
                      bool bias = false, Generator& gen = default_generator());
  CausalSelfAttention(int64_t hidden, int64_t num_heads, const AttentionOptions& options,
                      Generator& gen = default_generator());
  // x [B, T, hidden]; cos, sin [T, head_dim] from a RotaryEmbedding (undefined: no rotary), or
  // [B, 1, T, head_dim] per sequence. With a cache (generation): the T tokens' keys and values
  // join it, and the tokens attend to everything cached before them (nn/generation/kv_cache.h). position_ids
  // [B, T] (packed rows, no cache): each token attends only to the tokens of its document, whose
  // positions count from 0 (banded_causal_attention, ops/attention.h).
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache = nullptr,
                 const Tensor& position_ids = Tensor());
  Tensor forward(const Tensor& x) override { return forward(x, Tensor(), Tensor()); }

  int64_t hidden, num_heads, num_kv_heads, head_dim, sliding_window;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj;  // unfused only
  std::shared_ptr<Linear> qkv_proj;                 // fused_qkv only
  std::shared_ptr<Linear> o_proj;
  std::shared_ptr<RMSNorm> q_norm, k_norm;  // qk_norm only

 protected:
  std::string extra_repr() const override;

 private:
  AttentionOptions options_;  // with num_kv_heads and head_dim resolved
};

// GPT-2 attention: one fused c_attn projection to q, k, v (hidden -> 3 hidden), c_proj out.
// transformers stores c_attn / c_proj as Conv1D weights [in, out]; here they are Linear
// [out, in] (a checkpoint loader transposes them).
class GPT2Attention : public Module {
 public:
  GPT2Attention(int64_t hidden, int64_t num_heads, double attn_pdrop = 0.0, double resid_pdrop = 0.0,
                Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override { return forward(x, nullptr); }
  // With a cache, and position_ids: as CausalSelfAttention's.
  Tensor forward(const Tensor& x, const LayerCache* cache, const Tensor& position_ids = Tensor());

  int64_t hidden, num_heads, head_dim;
  double attn_pdrop;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> resid_dropout;
};

}  // namespace tg::nn
