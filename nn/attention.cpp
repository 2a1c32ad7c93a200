#include "nn/attention.h"

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "core/factory.h"
#include "ops/attention.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/masked_fill.h"
#include "ops/matmul.h"
#include "ops/apply_rotary.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "ops/unary.h"

namespace tg::nn {
namespace {

void check_input(const char* op, const Tensor& x, int64_t hidden) {
  TG_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == hidden, op, "x must be [B, T, ", hidden, "], got ",
           x.defined() ? shape_str(x.shape()) : std::string("undefined"));
}

// [B, T, heads * hd] -> [B, heads, T, hd], each head RMS-normalised first where `norm` is given
// (with `whole`, all heads * hd of a token at once).
Tensor split_heads(const Tensor& x, int64_t heads, int64_t hd, Module* norm = nullptr, bool whole = false) {
  Tensor h = reshape(norm && whole ? norm->forward(x) : x, {x.shape()[0], x.shape()[1], heads, hd});
  return transpose(norm && !whole ? norm->forward(h) : h, 1, 2);
}

// Rotary embedding of q and k with the same tables (shared [T, hd] or per-sequence [B, 1, T, hd]),
// one fused op for both. Tables narrower than the head rotate its first dims and pass the rest
// (Phi-3's partial_rotary_factor).
std::pair<Tensor, Tensor> rotate(const Tensor& q, const Tensor& k, const Tensor& cos, const Tensor& sin) {
  const int64_t last = q.dim() - 1, hd = q.shape()[last], rd = cos.shape().back();
  if (rd < hd) {
    auto [qr, kr] = apply_rotary_pos_emb(slice(q, last, 0, rd), slice(k, last, 0, rd), cos, sin);
    return {cat({qr, slice(q, last, rd, hd)}, last), cat({kr, slice(k, last, rd, hd)}, last)};
  }
  return apply_rotary_pos_emb(q, k, cos, sin);
}

// A cached step's mask under a sliding window: query column c sees key columns c - window < j <= c,
// and of those what the step's own mask allows (padding). Columns, not positions: a sequence's
// padding shifts its queries and keys alike.
LayerCache windowed(const LayerCache& cache, int64_t window, Device device) {
  const CacheStep& s = cache.step;
  const int64_t T = s.tokens, S = s.start + T;
  std::vector<float> m(static_cast<size_t>(T * S));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = std::max<int64_t>(0, s.start + t - window + 1); j <= s.start + t; ++j) m[t * S + j] = 1;
  Tensor keep = from_vector(m, {T, S}, device);
  if (s.attn_mask.defined()) keep = mul(to(s.attn_mask, kFloat32), keep);
  LayerCache out = cache;
  out.step.attn_mask = to(keep, kBool);
  out.step.is_causal = false;
  return out;
}

// Attention of q over k, v: causal for training (inside each document of packed rows, and the
// sliding window); with a cache, over every cached column as the cache step says.
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const LayerCache* cache, double dropout_p,
              Generator& gen, bool gqa, const char* who, std::optional<double> scale = std::nullopt,
              const Tensor& position_ids = Tensor(), int64_t window = 0) {
  if (!cache) return banded_causal_attention(q, k, v, position_ids, window, scale, dropout_p, gen, gqa);
  TG_CHECK(!position_ids.defined(), who, "position_ids are for packed training rows, not for a cached forward");
  auto [keys, values] = append_to_cache(*cache, k, v, who);
  return scaled_dot_product_attention(q, keys, values, cache->step.is_causal, scale, dropout_p, gen, gqa,
                                      cache->step.attn_mask);
}

// softmax(tanh(q k^T * scale / cap) * cap, masked) v, as transformers' eager Gemma 2 attention: q
// [B, H, T, D], k and v [B, Hkv, S, D]; keep (bool [T, S] or [B, 1, T, S], true: the key takes part;
// undefined: every key) or, with `causal`, the causal mask.
Tensor softcapped_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, double cap,
                            const Tensor& keep, bool causal) {
  const int64_t B = q.shape()[0], H = q.shape()[1], T = q.shape()[2], D = q.shape()[3];
  const int64_t Hkv = k.shape()[1], S = k.shape()[2], group = H / Hkv;
  // Each kv head's `group` query heads as one block of group * T rows: k and v are read, not repeated.
  Tensor scores = reshape(matmul(reshape(q, {B, Hkv, group * T, D}), transpose(k, -2, -1)), {B, Hkv, group, T, S});
  scores = mul(tanh(div(mul(scores, scale), cap)), cap);
  Tensor drop;  // true: masked out
  if (causal) drop = causal_mask(T, S, q.device());
  if (keep.defined()) {
    drop = to(1.0 - to(keep, kFloat32), kBool);
    if (drop.dim() == 4) drop = unsqueeze(drop, 2);  // [B, 1, 1, T, S]
  }
  if (drop.defined()) scores = masked_fill(scores, drop, -std::numeric_limits<double>::infinity());
  Tensor p = to(softmax(scores, -1), q.dtype());
  return reshape(matmul(reshape(p, {B, Hkv, group * T, S}), v), {B, H, T, D});
}

// [B, heads, T, hd] -> [B, T, heads * hd]
Tensor merge_heads(const Tensor& x) {
  return reshape(transpose(x, 1, 2), {x.shape()[0], x.shape()[2], x.shape()[1] * x.shape()[3]});
}

// What CausalSelfAttention computes between its projections: q [B, T, num_heads * head_dim], k and
// v [B, T, num_kv_heads * head_dim] (o.num_kv_heads and o.head_dim resolved), each head of q and k
// (or the whole of each, qk_norm_whole) through q_norm / k_norm where given, rotated by cos / sin
// -> [B, T, num_heads * head_dim].
Tensor causal_attention(int64_t num_heads, const AttentionOptions& o, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& cos, const Tensor& sin, const LayerCache* cache,
                        Module* q_norm, Module* k_norm, const Tensor& position_ids) {
  const char* who = "CausalSelfAttention";
  Tensor qh = split_heads(q, num_heads, o.head_dim, q_norm, o.qk_norm_whole);
  Tensor kh = split_heads(k, o.num_kv_heads, o.head_dim, k_norm, o.qk_norm_whole);
  Tensor vh = split_heads(v, o.num_kv_heads, o.head_dim);
  if (cos.defined()) {
    std::tie(qh, kh) = rotate(qh, kh, cos, sin);
  }
  const int64_t T = q.shape()[1];
  // Generation once the cache holds more columns than the window: the older keys masked.
  LayerCache in_window;
  if (cache && o.sliding_window > 0 && cache->step.start + cache->step.tokens > o.sliding_window) {
    TG_CHECK(!cache->step.column.defined(), who, "a static decode step (CUDA graph) past sliding_window ",
             o.sliding_window, " is not supported (position ", cache->step.max_position,
             "): generate without the CUDA graph");
    in_window = windowed(*cache, o.sliding_window, q.device());
    cache = &in_window;
  }
  Tensor a;
  if (o.softcap > 0) {
    const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(o.head_dim));
    if (cache) {
      TG_CHECK(!position_ids.defined(), who, "position_ids are for packed training rows, not for a cached forward");
      auto [keys, values] = append_to_cache(*cache, kh, vh, who);
      a = softcapped_attention(qh, keys, values, scale, o.softcap, cache->step.attn_mask, cache->step.is_causal);
    } else {
      // documents and the window as a mask: the attention kernels have no soft-capping
      const bool banded = position_ids.defined() || (o.sliding_window > 0 && T > o.sliding_window);
      const Tensor keep = banded ? banded_causal_mask(position_ids, o.sliding_window, T, T, q.device()) : Tensor();
      a = softcapped_attention(qh, kh, vh, scale, o.softcap, keep, !banded);
    }
  } else {
    // Grouped-query heads: the attention kernels read each kv head for its query heads in place.
    a = attend(qh, kh, vh, cache, 0.0, default_generator(), o.num_kv_heads != num_heads, who, o.scale, position_ids,
               o.sliding_window);
  }
  return merge_heads(a);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(int64_t h, int64_t heads, int64_t kv_heads, bool bias, Generator& gen)
    : CausalSelfAttention(h, heads, AttentionOptions{.num_kv_heads = kv_heads, .qkv_bias = bias, .o_bias = bias}, gen) {}


CausalSelfAttention::CausalSelfAttention(int64_t h, int64_t heads, const AttentionOptions& o, Generator& gen)
    : Module("CausalSelfAttention"),
      hidden(h),
      num_heads(heads),
      num_kv_heads(o.num_kv_heads ? o.num_kv_heads : heads),
      sliding_window(o.sliding_window),
      options_(o) {
  TG_CHECK(heads > 0 && (o.head_dim > 0 || h % heads == 0), "CausalSelfAttention", "hidden ", h,
           " must be divisible by num_heads ", heads, " (or head_dim given)");
  TG_CHECK(num_kv_heads > 0 && heads % num_kv_heads == 0, "CausalSelfAttention", "num_kv_heads ", num_kv_heads,
           " must divide num_heads ", heads);
  TG_CHECK(o.sliding_window >= 0, "CausalSelfAttention", "sliding_window must be >= 0, got ", o.sliding_window);
  TG_CHECK(o.softcap >= 0 && (!o.scale || *o.scale > 0), "CausalSelfAttention", "softcap must be >= 0 and scale > 0, got ",
           o.softcap, " and ", o.scale.value_or(1.0));
  head_dim = o.head_dim > 0 ? o.head_dim : h / heads;
  options_.num_kv_heads = num_kv_heads;
  options_.head_dim = head_dim;
  if (o.fused_qkv) {
    qkv_proj = std::make_shared<Linear>(h, (heads + 2 * num_kv_heads) * head_dim, o.qkv_bias, gen);
    o_proj = std::make_shared<Linear>(heads * head_dim, h, o.o_bias, gen);
    register_module("o_proj", o_proj);  // before qkv_proj, as transformers' Phi3Attention (the init's order)
    register_module("qkv_proj", qkv_proj);
  } else {
    q_proj = std::make_shared<Linear>(h, heads * head_dim, o.qkv_bias, gen);
    k_proj = std::make_shared<Linear>(h, num_kv_heads * head_dim, o.qkv_bias, gen);
    v_proj = std::make_shared<Linear>(h, num_kv_heads * head_dim, o.qkv_bias, gen);
    o_proj = std::make_shared<Linear>(heads * head_dim, h, o.o_bias, gen);
    place_weights_adjacent({q_proj, k_proj, v_proj});  // forward_group's one GEMM reads them in place
    register_module("q_proj", q_proj);
    register_module("k_proj", k_proj);
    register_module("v_proj", v_proj);
    register_module("o_proj", o_proj);
  }
  if (o.qk_norm) {
    const int64_t q_dim = o.qk_norm_whole ? heads * head_dim : head_dim;
    const int64_t k_dim = o.qk_norm_whole ? num_kv_heads * head_dim : head_dim;
    q_norm = std::make_shared<RMSNorm>(q_dim, o.qk_norm_eps, o.qk_norm_unit_offset);
    k_norm = std::make_shared<RMSNorm>(k_dim, o.qk_norm_eps, o.qk_norm_unit_offset);
    register_module("q_norm", q_norm);
    register_module("k_norm", k_norm);
  }
}

Tensor CausalSelfAttention::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache,
                                   const Tensor& position_ids) {
  check_input("CausalSelfAttention", x, hidden);
  const int64_t q = num_heads * head_dim, kv = num_kv_heads * head_dim;
  const std::vector<Tensor> qkv = qkv_proj ? split(qkv_proj->forward(x), {q, kv, kv}, -1)
                                           : forward_group({q_proj, k_proj, v_proj}, x);  // one op for the three
  return o_proj->forward(causal_attention(num_heads, options_, qkv[0], qkv[1], qkv[2], cos, sin, cache,
                                          q_norm.get(), k_norm.get(), position_ids));
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

Tensor GPT2Attention::forward(const Tensor& x, const LayerCache* cache, const Tensor& position_ids) {
  check_input("GPT2Attention", x, hidden);
  std::vector<Tensor> qkv = split(c_attn->forward(x), hidden, -1);
  Tensor q = split_heads(qkv[0], num_heads, head_dim);
  Tensor k = split_heads(qkv[1], num_heads, head_dim);
  Tensor v = split_heads(qkv[2], num_heads, head_dim);
  Tensor a = attend(q, k, v, cache, is_training() ? attn_pdrop : 0.0, default_generator(), false, "GPT2Attention",
                    std::nullopt, position_ids);
  return resid_dropout->forward(c_proj->forward(merge_heads(a)));
}

}  // namespace tg::nn
