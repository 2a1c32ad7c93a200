#include "optim/clip_grad.h"

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/reduce.h"

namespace tg::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  TG_CHECK(max_norm >= 0, "clip_grad_norm_", "max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  bool all_f64 = true;
  for (const auto& p : params)
    if (p.defined() && p.grad().defined()) {
      grads.push_back(p.grad());
      all_f64 = all_f64 && p.grad().dtype() == kFloat64;
    }
  if (grads.empty()) return scalar_tensor(0.0);
  // Sums of squares in float32 (float64 when every grad is), on the first grad's device.
  const DType acc = all_f64 ? kFloat64 : kFloat32;
  const Device device = grads[0].device();
  Tensor total_sq;
  for (const auto& g : grads) {
    Tensor gf = to(g, acc);
    Tensor sq = to(sum(mul(gf, gf)), device);
    total_sq = total_sq.defined() ? add(total_sq, sq) : sq;
  }
  Tensor total = sqrt(total_sq);
  // coef = min(1, max_norm / (total + 1e-6)) = 1 - relu(1 - c): stays on the device.
  Tensor c = div(scalar_tensor(max_norm, {acc, device}), add(total, 1e-6));
  Tensor coef = sub(scalar_tensor(1.0, {acc, device}), relu(sub(scalar_tensor(1.0, {acc, device}), c)));
  for (const auto& g : grads) copy_(g, mul(g, to(to(coef, g.device()), g.dtype())));
  return total;
}

}  // namespace tg::optim
