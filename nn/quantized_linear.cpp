#include "nn/quantized_linear.h"

#include "ops/cast.h"

namespace tg::nn {

std::optional<LinearSpec> QuantizedLinear::spec() const {
  LinearSpec s{Tensor(), bias.defined() ? tg::to(bias, compute_dtype) : bias};
  s.frozen = frozen();
  return s;
}

}  // namespace tg::nn
