// Backend contract for the fused AdamW step (ops/adamw_step.h), and the per-element update both
// backends compute, so the CPU and the GPU apply the same formula in the same order.
#pragma once

#include <cmath>
#include <vector>

#include "core/tensor.h"
#include "ops/elementwise_math.h"  // TG_HOST_DEVICE, TG_MATH_INLINE

namespace tg {

// Scalars shared by every tensor of a step.
template <class S>
struct AdamWHyper {
  S one_minus_beta1, beta2, one_minus_beta2, eps;
  S beta1;  // for the bias corrections (1 - (1 - beta1) need not round back to beta1)
};

// Scalars of one tensor, from its lr, weight decay and step count t.
template <class S>
struct AdamWScale {
  S decay;         // 1 - lr * weight_decay (decoupled weight decay)
  S step_size;     // lr / (1 - beta1^t)
  S inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
};

// The scalars in float64, on the host or (from device memory, for CUDA graphs) on the GPU with
// the same roundings: the product is rounded before the subtraction on both (no FMA).
TG_HOST_DEVICE inline AdamWScale<double> adamw_scale(double lr, double weight_decay, double t, double beta1,
                                                    double beta2) {
  using std::pow;
  using std::sqrt;
#ifdef __CUDA_ARCH__
  const double lr_wd = __dmul_rn(lr, weight_decay);
#else
  const double lr_wd = lr * weight_decay;
#endif
  return {1.0 - lr_wd, lr / (1.0 - pow(beta1, t)), 1.0 / sqrt(1.0 - pow(beta2, t))};
}

// The update of torch.optim.AdamW, in place:
//   m = m + (g - m)(1 - b1)   (torch: exp_avg.lerp_(grad, 1 - beta1))
//   v = b2 v + (1 - b2) g^2
//   p = p (1 - lr wd) - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// A is a scalar (the CUDA kernel) or an Eigen array of a chunk (the CPU kernel: its sqrt
// vectorises); S is A's scalar type. sqrt is found by argument-dependent lookup for Eigen arrays.
template <class A, class G, class S>
TG_HOST_DEVICE TG_MATH_INLINE void adamw_update(A& p, A& m, A& v, const G& g, const AdamWHyper<S>& h,
                                                const AdamWScale<S>& s) {
  using std::sqrt;
  m = m + (g - m) * h.one_minus_beta1;
  v = v * h.beta2 + (g * g) * h.one_minus_beta2;
  p = p * s.decay - m / (sqrt(v) * s.inv_sqrt_bc2 + h.eps) * s.step_size;
}

// One tensor of a fused step. param and grad: one dtype (float32, bfloat16; float64 on the CPU),
// exp_avg and exp_avg_sq: float32 for a bfloat16 param, else param's dtype. All contiguous,
// non-empty, of one shape and device; grad shares no memory with the others.
// The CPU kernel applies `scale`. The CUDA kernel reads everything from device memory (so a CUDA
// graph replays it with the lr and step of the moment): `counters` is float64 [4] (the steps
// taken, then the scale of the last step), `lr_wd` float64 [2]; it counts the step into
// counters[0] and writes adamw_scale(lr, wd, counters[0]) to counters[1..3] before the update.
struct AdamWSlot {
  Tensor param, grad, exp_avg, exp_avg_sq;
  AdamWScale<double> scale;
  Tensor counters, lr_wd;
};

// Both backends update every slot (all of one param dtype and device) in place.
namespace cpu {
void adamw_step(const std::vector<AdamWSlot>& slots, const AdamWHyper<double>& hyper);
}  // namespace cpu
namespace cuda {
// Tensors one launch updates (their pointers and scalars travel as kernel parameters); a longer
// list takes ceil(n / kAdamWTensorsPerLaunch) launches.
constexpr int kAdamWTensorsPerLaunch = 64;
void adamw_step(const std::vector<AdamWSlot>& slots, const AdamWHyper<double>& hyper);
}  // namespace cuda

}  // namespace tg
