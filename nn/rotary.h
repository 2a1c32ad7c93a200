// nn::RotaryEmbedding: the cos/sin tables of rotary position embedding for positions
// 0..max_positions-1 (non-persistent buffers: moved with the module, never saved or trained),
// with the frequency scalings of config.json's rope_scaling / rope_parameters.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/generation/kv_cache.h"
#include "nn/module.h"

namespace tg::nn {

// transformers' rope_type and its fields (modeling_rope_utils). "default": 1 / theta^(2i/hd);
// "linear": divided by factor; "llama3": Llama 3.1's ramp between original_max_position_embeddings
// / low_freq_factor and / high_freq_factor wavelengths; "dynamic": NTK scaling, which transformers
// applies only past max_position_embeddings, so within the tables it is the default; "yarn":
// interpolated (divided by factor) below the beta_slow rotations over original_max_position_embeddings,
// kept above beta_fast, a ramp between, cos and sin scaled by attention_factor; "longrope" (Phi-3
// 128k, Phi-3.5): divided by short_factor[i], or by long_factor[i] when the forward's sequence
// (a cached one's last position + 1) passes original_max_position_embeddings, cos and sin scaled.
struct RopeScaling {
  std::string rope_type = "default";
  double factor = 1.0;  // yarn, longrope: 0 = max_position_embeddings / original_max_position_embeddings
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  // The pre-training context of llama3, yarn and longrope (config.json: rope_parameters', or its
  // top-level field, which transformers prefers; else max_position_embeddings).
  int64_t original_max_position_embeddings = 8192;
  double attention_factor = 0;  // yarn, longrope: cos and sin times this; 0: derived as transformers does
  double beta_fast = 32, beta_slow = 1;  // yarn: the ramp's bounds, in rotations
  double mscale = 0, mscale_all_dim = 0;  // yarn (DeepSeek): both > 0 derive attention_factor from their ratio
  bool truncate = true;                  // yarn: the ramp's bounds rounded out to whole dims
  std::vector<double> short_factor = {}, long_factor = {};  // longrope: one per frequency (rotary dims / 2)
  double partial_rotary_factor = 1.0;  // RoPE over the first int(head_dim * this) dims of a head (Phi-3)

  // tg::Error naming the field and its value for anything out of range, or that would divide by
  // zero, take a log of 0 or overflow float32 where the tables are computed (transformers'
  // modeling_rope_utils): the tables of `max_positions` positions for heads of `head_dim` (the
  // factor lists' length is half of its rotary part) and base `theta` (`theta_field` in messages)
  // are then finite.
  void validate(int64_t head_dim, int64_t max_positions, double theta, const char* theta_field = "rope_theta") const;
  int64_t rotary_dim(int64_t head_dim) const;
  bool operator==(const RopeScaling&) const = default;
};

class RotaryEmbedding : public Module {
 public:
  RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta = 10000.0, const RopeScaling& scaling = {});
  // The [T, rotary_dim] slices for positions 0..T-1 (views of the buffers; longrope: of the long
  // tables when T passes original_max_position_embeddings).
  std::pair<Tensor, Tensor> cos_sin(int64_t T) const;
  // The rows of a cached forward's positions: [T, rotary_dim] slices when every sequence has the
  // same ones, else per sequence [B, 1, T, rotary_dim] in `dtype` (as apply_rotary casts them);
  // longrope: of the long tables once the last position passes original_max_position_embeddings.
  std::pair<Tensor, Tensor> cos_sin(const CacheStep& step, DType dtype) const;
  // The rows of position_ids [B, T] (int32 / int64; packed rows): per sequence [B, 1, T, rotary_dim]
  // in `dtype` (longrope: of the long tables when T passes original_max_position_embeddings). A position outside [0, max_positions) is a tg::Error (on a GPU, as embedding's
  // index checks report it).
  std::pair<Tensor, Tensor> cos_sin(const Tensor& position_ids, DType dtype) const;

  int64_t head_dim, max_positions;
  double theta;
  RopeScaling scaling;
  Tensor cos, sin;  // [max_positions, rotary_dim] (longrope: the short factors', original_max_position_embeddings rows)
  Tensor cos_long, sin_long;  // longrope: the long factors', [max_positions, rotary_dim]

 protected:
  std::string extra_repr() const override;
};

}  // namespace tg::nn
