// Normalisation layers over the last dim (statistics in float32, see ops/rms_norm.h,
// ops/layer_norm.h). Weights start at 1, biases at 0.
#pragma once

#include <cstdint>
#include "nn/module.h"

namespace tg::nn {

// y = x / sqrt(mean(x^2) + eps) * weight (Llama's LlamaRMSNorm, torch.nn.RMSNorm).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;

  int64_t dim;
  double eps;
  Tensor weight;

 protected:
  std::string extra_repr() const override;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias (torch.nn.LayerNorm).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true);
  Tensor forward(const Tensor& x) override;

  int64_t dim;
  double eps;
  Tensor weight, bias;

 protected:
  std::string extra_repr() const override;
};

}  // namespace tg::nn
