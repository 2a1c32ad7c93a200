// nn::KVCache: the keys and values of every attention layer for generation, allocated once
// (transformers' StaticCache): per layer [batch, kv_heads, max_length, head_dim], filled column by
// column as the model's cached forward runs. Sequences of different lengths are left-padded:
// sequence b's first padding[b] columns hold no token, no query attends to them, and b's positions
// count from its first real token, as transformers' position_ids from an attention mask.
// nn::generate (nn/generation/generation.h) drives it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg::nn {

// What one cached forward of T tokens looks like (KVCache::step): they go to columns
// start..start+T-1 and attend to columns 0..start+T-1.
struct CacheStep {
  int64_t start = 0, tokens = 0;
  // uniform (no sequence padded): every sequence's positions are start..start+T-1 and `positions`
  // is undefined; else each token's position in its own sequence, [B, T] int64 on the cache's
  // device (padding columns: 0).
  bool uniform = true;
  Tensor positions;
  int64_t max_position = 0;  // the largest position of the step
  // For scaled_dot_product_attention: bool [B, 1, T, start + T] (true: attend) when some sequence is
  // padded or a chunk follows cached tokens; else undefined, and is_causal says whether the
  // top-left aligned causal mask is the right one (start 0) or every key is visible (T 1).
  Tensor attn_mask;
  bool is_causal = false;
  // A static decode step (KVCache::enable_static_decode): int64 [1] on the device, the column the
  // token goes to; the step attends to every column of the cache through attn_mask.
  Tensor column;
};

// One layer's part of a cached forward: its buffers and the step.
struct LayerCache {
  Tensor keys, values;  // [B, kv_heads, max_length, head_dim]
  CacheStep step;
};

class KVCache {
 public:
  // padding: per sequence, its leading columns without a token (empty: none); each < max_length.
  KVCache(int64_t num_layers, int64_t batch, int64_t kv_heads, int64_t head_dim, int64_t max_length,
          TensorOptions options, std::vector<int64_t> padding = {});

  int64_t num_layers() const { return static_cast<int64_t>(keys_.size()); }
  int64_t batch() const { return batch_; }
  int64_t max_length() const { return max_length_; }
  int64_t length() const { return length_; }  // columns filled
  const std::vector<int64_t>& padding() const { return padding_; }
  DType dtype() const { return keys_.front().dtype(); }
  Device device() const { return keys_.front().device(); }

  // The layout of the next T tokens; tg::Error (naming `who`) when they do not fit in max_length.
  CacheStep step(int64_t T, const char* who) const;
  LayerCache layer(int64_t i, const CacheStep& step) const;
  // After every layer ran a step of T tokens: they are part of the cache.
  void advance(int64_t T);

  // Static decode (transformers' StaticCache, for a CUDA graph of the decode step): every step of
  // one token then writes its column through index_copy_ and attends to all max_length columns,
  // the unfilled ones masked (the buffers are zeroed here, so they hold no NaN), with its column,
  // positions and mask in device tensors of fixed addresses. upload_decode_step() writes them for
  // the next column (length()): call it before each such step; step(1) does not upload (a capture
  // could not).
  void enable_static_decode();
  void upload_decode_step();
  bool static_decode() const { return decode_column_.defined(); }

 private:
  int64_t batch_, max_length_, length_ = 0;
  std::vector<int64_t> padding_;
  std::vector<Tensor> keys_, values_;
  Tensor decode_column_, decode_positions_, decode_mask_;  // [1], [B, 1], [B, 1, 1, max_length]
  int64_t uploaded_for_ = -1;                              // the column they hold
};

// For an attention layer's cached forward: writes k, v [B, kv_heads, T, head_dim] into the layer's
// columns start..start+T-1 and returns the keys and values of columns 0..start+T-1 (views; a
// static decode step: every column).
// tg::Error (naming `who`) under grad mode (the cache is not differentiable) or when k and v do
// not fit the buffers.
std::pair<Tensor, Tensor> append_to_cache(const LayerCache& cache, const Tensor& k, const Tensor& v, const char* who);

}  // namespace tg::nn
