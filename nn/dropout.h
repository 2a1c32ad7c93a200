// nn::Dropout: zeroes elements with probability p while training (scaling the rest by
// 1/(1-p)); the identity in eval mode or when p == 0. Masks are drawn from the default generator
// when forward runs (as torch.nn.Dropout: tg::manual_seed makes them repeat), never from a
// generator the module was built with, which may be gone by then (from_pretrained's is).
#pragma once

#include "core/generator.h"
#include "nn/module.h"

namespace tg::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;

  double p;

 protected:
  std::string extra_repr() const override;

};

}  // namespace tg::nn
