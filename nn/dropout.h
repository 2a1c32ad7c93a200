// nn::Dropout: zeroes elements with probability p while training (scaling the rest by
// 1/(1-p)); the identity in eval mode or when p == 0. Masks are drawn from `gen`, which must
// outlive the module (the default generator does).
#pragma once

#include "core/generator.h"
#include "nn/module.h"

namespace tg::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;

  double p;

 protected:
  std::string extra_repr() const override;

 private:
  Generator* gen_;
};

}  // namespace tg::nn
