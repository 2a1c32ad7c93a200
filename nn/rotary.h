// nn::RotaryEmbedding: the cos/sin tables of rotary position embedding for positions
// 0..max_positions-1 (non-persistent buffers: moved with the module, never saved or trained).
#pragma once

#include <cstdint>
#include <utility>

#include "nn/module.h"

namespace tg::nn {

class RotaryEmbedding : public Module {
 public:
  RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta = 10000.0);
  // The [T, head_dim] slices for positions 0..T-1 (views of the buffers).
  std::pair<Tensor, Tensor> cos_sin(int64_t T) const;

  int64_t head_dim, max_positions;
  double theta;
  Tensor cos, sin;  // [max_positions, head_dim]

 protected:
  std::string extra_repr() const override;
};

}  // namespace tg::nn
