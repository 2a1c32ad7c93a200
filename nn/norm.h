// Normalisation layers over the last dim (statistics in float32, see ops/rms_norm.h,
// ops/layer_norm.h). Weights start at 1, biases at 0.
#pragma once

#include <cstdint>
#include "nn/module.h"

namespace tg::nn {

// What the normalisation layers share: the layers peft's freeze_norms freezes and the Trainer's
// weight decay leaves out (transformers' ALL_LAYERNORM_LAYERS).
class Norm : public Module {
 public:
  int64_t dim;
  double eps;
  Tensor weight;

 protected:
  Norm(const char* type_name, int64_t dim, double eps);  // weight [dim], uninitialised
  std::string extra_repr() const override;
};

// y = x / sqrt(mean(x^2) + eps) * weight (Llama's LlamaRMSNorm, torch.nn.RMSNorm). With
// unit_offset (Gemma's GemmaRMSNorm): y = x / sqrt(mean(x^2) + eps) * (1 + weight), computed in
// float32 and rounded once to x's dtype, the weight starting at 0.
class RMSNorm : public Norm {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-5, bool unit_offset = false);
  Tensor forward(const Tensor& x) override;

  bool unit_offset;

 protected:
  std::string extra_repr() const override;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias (torch.nn.LayerNorm).
class LayerNorm : public Norm {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true);
  Tensor forward(const Tensor& x) override;

  Tensor bias;
};

// An RMSNorm or a LayerNorm (a Norm).
bool is_norm(const Module& m);

}  // namespace tg::nn
