// nn::Linear: y = x W^T + b, W [out, in] (torch.nn.Linear). Initialised like PyTorch:
// W, b ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform, a = sqrt(5)); models re-initialise.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/generator.h"
#include "nn/module.h"
#include "ops/linear.h"
#include "ops/lora_linear.h"

namespace tg::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  // Wraps existing tensors (weight [out, in], optional bias [out]), keeping their requires_grad.
  explicit Linear(const Tensor& weight, const Tensor& bias = {});
  Tensor forward(const Tensor& x) override;
  // What forward computes as a linear_group part, or nullopt when it is not one (a subclass
  // that does not override spec(), LoRA with dropout in training). The base returns {W, b}
  // only for an exact nn::Linear.
  virtual std::optional<LinearSpec> spec() const;
  // An exact nn::Linear: no subclass (LoRA, a quantised base) changes what forward computes.
  bool is_plain() const;

  int64_t in_features, out_features;
  Tensor weight;  // [out_features, in_features]
  Tensor bias;    // [out_features], undefined without bias

 protected:
  // For subclasses (LoRALinear) that take over an existing layer's tensors.
  Linear(const std::string& type_name, int64_t in_features, int64_t out_features, const Tensor& weight,
         const Tensor& bias);
  std::string extra_repr() const override;
};

// Moves the layers' weights into one allocation, consecutive row blocks in order (values kept;
// every handle sees the move), so forward_group's linear_group reads them as one [sum out, in]
// matrix: one GEMM, no copy. The models call it on their q / k / v and gate / up projections.
// Does nothing unless every weight is allocated, contiguous, of one dtype, device and input width.
// Module::to keeps such a group in one allocation.
void place_weights_adjacent(const std::vector<std::shared_ptr<Linear>>& layers);

// The layers' forward on one x, one linear_group when every layer has a spec of one dtype
// (each layer's own forward otherwise).
std::vector<Tensor> forward_group(const std::vector<std::shared_ptr<Linear>>& layers, const Tensor& x);

}  // namespace tg::nn
