#include "nn/dropout.h"

#include "ops/dropout.h"

namespace tg::nn {

Dropout::Dropout(double prob) : Module("Dropout"), p(prob) {
  TG_CHECK(prob >= 0.0 && prob <= 1.0, "Dropout", "p must be in [0, 1], got ", prob);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0.0) return x;  // no op recorded, nothing drawn
  return dropout(x, p, true, default_generator());
}

std::string Dropout::extra_repr() const { return "p=" + std::to_string(p); }

}  // namespace tg::nn
