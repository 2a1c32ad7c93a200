// Multi-head causal self-attention layers.
#pragma once

#include <cstdint>
#include <memory>

#include "core/generator.h"
#include "nn/dropout.h"
#include "nn/kv_cache.h"
#include "nn/linear.h"

namespace tg::nn {

// Llama attention: q/k/v/o projections, rotary embedding on q and k, grouped-query heads
// (num_kv_heads divides num_heads; each kv head serves num_heads / num_kv_heads query heads).
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t hidden, int64_t num_heads, int64_t num_kv_heads = 0 /* = num_heads */,
                      bool bias = false, Generator& gen = default_generator());
  // x [B, T, hidden]; cos, sin [T, head_dim] from a RotaryEmbedding (undefined: no rotary), or
  // [B, 1, T, head_dim] per sequence. With a cache (generation): the T tokens' keys and values
  // join it, and the tokens attend to everything cached before them (nn/kv_cache.h).
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache = nullptr);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor(), Tensor()); }

  int64_t hidden, num_heads, num_kv_heads, head_dim;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;

 protected:
  std::string extra_repr() const override;
};

// GPT-2 attention: one fused c_attn projection to q, k, v (hidden -> 3 hidden), c_proj out.
// transformers stores c_attn / c_proj as Conv1D weights [in, out]; here they are Linear
// [out, in] (a checkpoint loader transposes them).
class GPT2Attention : public Module {
 public:
  GPT2Attention(int64_t hidden, int64_t num_heads, double attn_pdrop = 0.0, double resid_pdrop = 0.0,
                Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override { return forward(x, nullptr); }
  // With a cache: as CausalSelfAttention's.
  Tensor forward(const Tensor& x, const LayerCache* cache);

  int64_t hidden, num_heads, head_dim;
  double attn_pdrop;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> resid_dropout;
};

}  // namespace tg::nn
