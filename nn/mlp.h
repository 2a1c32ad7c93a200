// Transformer feed-forward blocks.
#pragma once

#include <cstdint>
#include <memory>

#include "core/generator.h"
#include "nn/dropout.h"
#include "nn/linear.h"

namespace tg::nn {

// Llama's MLP: down_proj(silu(gate_proj(x)) * up_proj(x)).
class SwiGLUMLP : public Module {
 public:
  SwiGLUMLP(int64_t hidden, int64_t intermediate, bool bias = false, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
};

// GPT-2's MLP: dropout(c_proj(gelu_tanh(c_fc(x)))).
class GELUMLP : public Module {
 public:
  GELUMLP(int64_t hidden, int64_t intermediate, bool bias = true, double dropout = 0.0,
          Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
};

}  // namespace tg::nn
