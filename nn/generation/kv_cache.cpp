#include "nn/generation/kv_cache.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "ops/index_copy.h"
#include "ops/shape.h"

namespace tg::nn {

KVCache::KVCache(int64_t num_layers, int64_t batch, int64_t kv_heads, int64_t head_dim, int64_t max_length,
                 TensorOptions options, std::vector<int64_t> padding)
    : batch_(batch), max_length_(max_length), padding_(std::move(padding)) {
  TG_CHECK(num_layers > 0 && batch > 0 && kv_heads > 0 && head_dim > 0 && max_length > 0, "KVCache",
           "num_layers, batch, kv_heads, head_dim and max_length must be positive, got ", num_layers, ", ", batch, ", ",
           kv_heads, ", ", head_dim, ", ", max_length);
  TG_CHECK(is_floating_point(options.dtype), "KVCache", "wants a floating-point dtype, got ", options.dtype);
  if (padding_.empty()) padding_.assign(static_cast<size_t>(batch), 0);
  TG_CHECK(static_cast<int64_t>(padding_.size()) == batch, "KVCache", "padding has ", padding_.size(),
           " entries for a batch of ", batch);
  for (size_t b = 0; b < padding_.size(); ++b)
    TG_CHECK(padding_[b] >= 0 && padding_[b] < max_length, "KVCache", "padding[", b, "] = ", padding_[b],
             " is outside [0, max_length ", max_length, ")");
  options.requires_grad = false;
  for (int64_t i = 0; i < num_layers; ++i) {
    keys_.push_back(Tensor::empty({batch, kv_heads, max_length, head_dim}, options));
    values_.push_back(Tensor::empty({batch, kv_heads, max_length, head_dim}, options));
  }
}

namespace {

void check_no_grad(const char* who) {
  TG_CHECK(!grad_mode_enabled(), who,
           "a forward with a KVCache is inference only (no gradient flows through the cache): run it under "
           "NoGradGuard, as nn::generate does");
}

}  // namespace

CacheStep KVCache::step(int64_t T, const char* who) const {
  check_no_grad(who);
  TG_CHECK(T >= 1, who, "a cached forward needs at least one token, got ", T);
  TG_CHECK(length_ + T <= max_length_, who, "the KVCache holds ", max_length_, " columns, ", length_,
           " filled: ", T, " more tokens do not fit");
  CacheStep s;
  s.start = length_;
  s.tokens = T;
  const int64_t S = s.start + T;
  const int64_t min_pad = *std::min_element(padding_.begin(), padding_.end());
  if (static_decode() && T == 1) {
    TG_CHECK(uploaded_for_ == length_, who, "a static decode step of column ", length_, " without its inputs (",
             uploaded_for_ < 0 ? std::string("none uploaded") : "uploaded for column " + std::to_string(uploaded_for_),
             "): call KVCache::upload_decode_step() first");
    s.uniform = false;
    s.positions = decode_positions_;
    s.max_position = S - 1 - min_pad;
    s.attn_mask = decode_mask_;
    s.column = decode_column_;
    return s;
  }
  s.uniform = std::all_of(padding_.begin(), padding_.end(), [](int64_t p) { return p == 0; });
  s.max_position = S - 1 - min_pad;
  if (!s.uniform) {
    std::vector<int64_t> pos;
    pos.reserve(static_cast<size_t>(batch_ * T));
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t t = 0; t < T; ++t) pos.push_back(std::max<int64_t>(0, s.start + t - padding_[b]));
    s.positions = from_vector(pos, {batch_, T}, device());
  }
  if (s.uniform && (s.start == 0 || T == 1)) {
    s.is_causal = s.start == 0;  // a prompt alone: causal; one token after the cache: every key
    return s;
  }
  // Query t (column c = start + t) of sequence b sees columns j <= c that hold a token; a padding
  // column's own query sees itself only, so no row is empty.
  std::vector<bool> keep;
  keep.reserve(static_cast<size_t>(batch_ * T * S));
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t c = s.start + t;
      for (int64_t j = 0; j < S; ++j) keep.push_back(j <= c && (j >= padding_[b] || j == c));
    }
  s.attn_mask = from_vector(keep, {batch_, 1, T, S}, device());
  return s;
}

LayerCache KVCache::layer(int64_t i, const CacheStep& step) const {
  TG_CHECK(i >= 0 && i < num_layers(), "KVCache", "layer ", i, " of ", num_layers());
  return {keys_[static_cast<size_t>(i)], values_[static_cast<size_t>(i)], step};
}

void KVCache::enable_static_decode() {
  if (static_decode()) return;
  TG_CHECK(length_ == 0, "KVCache", "enable_static_decode() after ", length_,
           " columns were filled: call it before the first cached forward (it zeroes the buffers)");
  for (auto* buffers : {&keys_, &values_})
    for (Tensor& t : *buffers) fill_(t, 0.0);
  decode_column_ = Tensor::empty({1}, {kInt64, device()});
  decode_positions_ = Tensor::empty({batch_, 1}, {kInt64, device()});
  decode_mask_ = Tensor::empty({batch_, 1, 1, max_length_}, {kBool, device()});
}

void KVCache::upload_decode_step() {
  TG_CHECK(static_decode(), "KVCache", "upload_decode_step() wants enable_static_decode() first");
  const int64_t c = length_;
  TG_CHECK(c < max_length_, "KVCache", "the KVCache holds ", max_length_, " columns, all filled: no decode step fits");
  // As step() lays out a one-token step after the cache: column c sees the columns that hold a token.
  std::vector<int64_t> pos;
  std::vector<bool> keep;
  for (int64_t b = 0; b < batch_; ++b) {
    pos.push_back(std::max<int64_t>(0, c - padding_[b]));
    for (int64_t j = 0; j < max_length_; ++j) keep.push_back(j <= c && (j >= padding_[b] || j == c));
  }
  copy_(decode_column_, from_vector(std::vector<int64_t>{c}, {1}));
  copy_(decode_positions_, from_vector(pos, {batch_, 1}));
  copy_(decode_mask_, from_vector(keep, {batch_, 1, 1, max_length_}));
  uploaded_for_ = c;
}

void KVCache::advance(int64_t T) {
  TG_CHECK(T >= 1 && length_ + T <= max_length_, "KVCache", "advance by ", T, " past max_length ", max_length_,
           " (", length_, " filled)");
  length_ += T;
}

std::pair<Tensor, Tensor> append_to_cache(const LayerCache& cache, const Tensor& k, const Tensor& v, const char* who) {
  check_no_grad(who);
  const Shape& buf = cache.keys.shape();
  const int64_t start = cache.step.start, T = cache.step.tokens;
  const Shape want = {buf[0], buf[1], T, buf[3]};
  for (const Tensor* t : {&k, &v}) {
    TG_CHECK(t->shape() == want, who, "keys and values of shape ", t->shape(), " do not fit a KVCache step of ", want);
    TG_CHECK(t->dtype() == cache.keys.dtype() && t->device() == cache.keys.device(), who, "the layer computes ",
             t->dtype(), " on ", t->device(), ", the KVCache holds ", cache.keys.dtype(), " on ",
             cache.keys.device());
  }
  if (cache.step.column.defined()) {  // static decode: the column from device memory, every column attended
    index_copy_(cache.keys, 2, cache.step.column, k);
    index_copy_(cache.values, 2, cache.step.column, v);
    return {cache.keys, cache.values};
  }
  copy_(slice(cache.keys, 2, start, start + T), k);
  copy_(slice(cache.values, 2, start, start + T), v);
  return {slice(cache.keys, 2, 0, start + T), slice(cache.values, 2, 0, start + T)};
}

}  // namespace tg::nn
