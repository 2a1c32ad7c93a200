// nn::RotaryEmbedding: the cos/sin tables of rotary position embedding for positions
// 0..max_positions-1 (non-persistent buffers: moved with the module, never saved or trained),
// with the frequency scalings of config.json's rope_scaling / rope_parameters.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "nn/kv_cache.h"
#include "nn/module.h"

namespace tg::nn {

// transformers' rope_type and its fields. "default": 1 / theta^(2i/hd); "linear": divided by
// factor; "llama3": Llama 3.1's ramp between original_max_position_embeddings / low_freq_factor
// and / high_freq_factor wavelengths; "dynamic": NTK scaling, which transformers applies only
// past max_position_embeddings, so within the tables it is the default.
struct RopeScaling {
  std::string rope_type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;

  void validate() const;  // tg::Error naming the field
  bool operator==(const RopeScaling&) const = default;
};

class RotaryEmbedding : public Module {
 public:
  RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta = 10000.0, const RopeScaling& scaling = {});
  // The [T, head_dim] slices for positions 0..T-1 (views of the buffers).
  std::pair<Tensor, Tensor> cos_sin(int64_t T) const;
  // The rows of a cached forward's positions: [T, head_dim] slices when every sequence has the
  // same ones, else per sequence [B, 1, T, head_dim] in `dtype` (as apply_rotary casts them).
  std::pair<Tensor, Tensor> cos_sin(const CacheStep& step, DType dtype) const;
  // The rows of position_ids [B, T] (int32 / int64; packed rows): per sequence [B, 1, T, head_dim]
  // in `dtype`. A position outside [0, max_positions) is a tg::Error (on a GPU, as embedding's
  // index checks report it).
  std::pair<Tensor, Tensor> cos_sin(const Tensor& position_ids, DType dtype) const;

  int64_t head_dim, max_positions;
  double theta;
  RopeScaling scaling;
  Tensor cos, sin;  // [max_positions, head_dim]

 protected:
  std::string extra_repr() const override;
};

}  // namespace tg::nn
