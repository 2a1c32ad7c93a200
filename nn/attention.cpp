#include "nn/attention.h"

#include "ops/attention.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/rope.h"
#include "ops/shape.h"

namespace tg::nn {
namespace {

void check_input(const char* op, const Tensor& x, int64_t hidden) {
  TG_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == hidden, op, "x must be [B, T, ", hidden, "], got ",
           x.defined() ? shape_str(x.shape()) : std::string("undefined"));
}

// [B, T, heads * hd] -> [B, heads, T, hd]
Tensor split_heads(const Tensor& x, int64_t heads, int64_t hd) {
  return transpose(reshape(x, {x.shape()[0], x.shape()[1], heads, hd}), 1, 2);
}

// Rotary embedding with shared [T, hd] tables (the fused op), or per-sequence [B, 1, T, hd] ones
// (left-padded generation: the same formula, composed).
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  if (cos.dim() == 2) return apply_rotary(x, cos, sin);
  return add(mul(x, to(cos, x.dtype())), mul(rotate_half(x), to(sin, x.dtype())));
}

// Attention of q over k, v: causal for training; with a cache, over every cached column as the
// cache step says.
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const LayerCache* cache, double dropout_p,
              Generator& gen, bool gqa, const char* who) {
  if (!cache) return scaled_dot_product_attention(q, k, v, /*is_causal=*/true, std::nullopt, dropout_p, gen, gqa);
  auto [keys, values] = append_to_cache(*cache, k, v, who);
  return scaled_dot_product_attention(q, keys, values, cache->step.is_causal, std::nullopt, dropout_p, gen, gqa,
                                      cache->step.attn_mask);
}

// [B, heads, T, hd] -> [B, T, heads * hd]
Tensor merge_heads(const Tensor& x) {
  return reshape(transpose(x, 1, 2), {x.shape()[0], x.shape()[2], x.shape()[1] * x.shape()[3]});
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(int64_t h, int64_t heads, int64_t kv_heads, bool bias, Generator& gen)
    : Module("CausalSelfAttention"), hidden(h), num_heads(heads), num_kv_heads(kv_heads ? kv_heads : heads) {
  TG_CHECK(heads > 0 && h % heads == 0, "CausalSelfAttention", "hidden ", h, " must be divisible by num_heads ",
           heads);
  TG_CHECK(num_kv_heads > 0 && heads % num_kv_heads == 0, "CausalSelfAttention", "num_kv_heads ", num_kv_heads,
           " must divide num_heads ", heads);
  head_dim = h / heads;
  q_proj = std::make_shared<Linear>(h, heads * head_dim, bias, gen);
  k_proj = std::make_shared<Linear>(h, num_kv_heads * head_dim, bias, gen);
  v_proj = std::make_shared<Linear>(h, num_kv_heads * head_dim, bias, gen);
  o_proj = std::make_shared<Linear>(heads * head_dim, h, bias, gen);
  register_module("q_proj", q_proj);
  register_module("k_proj", k_proj);
  register_module("v_proj", v_proj);
  register_module("o_proj", o_proj);
}

Tensor CausalSelfAttention::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache) {
  check_input("CausalSelfAttention", x, hidden);
  const std::vector<Tensor> qkv = forward_group({q_proj, k_proj, v_proj}, x);  // one op for the three
  Tensor q = split_heads(qkv[0], num_heads, head_dim);
  Tensor k = split_heads(qkv[1], num_kv_heads, head_dim);
  Tensor v = split_heads(qkv[2], num_kv_heads, head_dim);
  if (cos.defined()) {
    q = rotate(q, cos, sin);
    k = rotate(k, cos, sin);
  }
  // Grouped-query heads: the attention kernels read each kv head for its query heads in place.
  Tensor a = attend(q, k, v, cache, 0.0, default_generator(), /*gqa=*/num_kv_heads != num_heads, "CausalSelfAttention");
  return o_proj->forward(merge_heads(a));
}

std::string CausalSelfAttention::extra_repr() const {
  return "num_heads=" + std::to_string(num_heads) + ", num_kv_heads=" + std::to_string(num_kv_heads) +
         ", head_dim=" + std::to_string(head_dim);
}

GPT2Attention::GPT2Attention(int64_t h, int64_t heads, double attn_p, double resid_p, Generator& gen)
    : Module("GPT2Attention"), hidden(h), num_heads(heads), attn_pdrop(attn_p) {
  TG_CHECK(heads > 0 && h % heads == 0, "GPT2Attention", "hidden ", h, " must be divisible by num_heads ", heads);
  head_dim = h / heads;
  c_attn = std::make_shared<Linear>(h, 3 * h, true, gen);
  c_proj = std::make_shared<Linear>(h, h, true, gen);
  resid_dropout = std::make_shared<Dropout>(resid_p);
  register_module("c_attn", c_attn);
  register_module("c_proj", c_proj);
  register_module("resid_dropout", resid_dropout);
}

Tensor GPT2Attention::forward(const Tensor& x, const LayerCache* cache) {
  check_input("GPT2Attention", x, hidden);
  std::vector<Tensor> qkv = split(c_attn->forward(x), hidden, -1);
  Tensor q = split_heads(qkv[0], num_heads, head_dim);
  Tensor k = split_heads(qkv[1], num_heads, head_dim);
  Tensor v = split_heads(qkv[2], num_heads, head_dim);
  Tensor a = attend(q, k, v, cache, is_training() ? attn_pdrop : 0.0, default_generator(), false, "GPT2Attention");
  return resid_dropout->forward(c_proj->forward(merge_heads(a)));
}

}  // namespace tg::nn
