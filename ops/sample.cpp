#include "ops/sample.h"

#include <cmath>

#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/sample_kernels.h"
#include "ops/shape.h"

namespace tg {

Tensor sample_categorical(const Tensor& logits, double temperature, uint64_t seed, uint64_t first_row) {
  constexpr const char* kOp = "sample_categorical";
  check_floating(kOp, "logits", logits);
  TG_CHECK(logits.dim() == 2 && logits.shape()[1] > 0, kOp, "wants logits [B, V] with V >= 1, got ", logits.shape());
  const float t = static_cast<float>(temperature);
  TG_CHECK(std::isfinite(t) && t > 0, kOp, "temperature must be a positive float32, got ", temperature);
  Tensor out = Tensor::empty({logits.shape()[0]}, {kInt64, logits.device()});
  if (out.numel() > 0) TG_DISPATCH(logits.device(), sample_categorical, out, contiguous(logits), t, seed, first_row);
  return out;
}

}  // namespace tg
