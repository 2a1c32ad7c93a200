// adamw_step_: the fused AdamW update of a list of parameters, in place and not differentiable
// (torch's _fused_adamw_). optim::AdamW calls it once per step. Per element, the formula of
// adamw_update (ops/adamw_step_kernels.h); per tensor, its own lr, weight decay and step count:
// host numbers, or tensors on the parameter's device that the step reads and counts in (what
// optim::AdamW passes, so a CUDA graph of the step replays with the current lr and step).
//
// CPU: float32, float64 and bfloat16 parameters, all tensors of a step in one parallel pass
// over 1024-element chunks (trace "adamw_step.fused_cpu"). CUDA: float32 and bfloat16
// parameters, one multi-tensor launch per 64 tensors (trace "adamw_step.cuda_launch" per
// launch), no allocation, no host synchronisation. bfloat16 parameters keep float32 exp_avg /
// exp_avg_sq. A non-contiguous parameter or grad is updated through a contiguous copy.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg {

struct AdamWParamStep {
  Tensor param, grad, exp_avg, exp_avg_sq;  // exp_avg, exp_avg_sq contiguous
  double lr = 0, weight_decay = 0;
  int64_t step = 1;  // the step being taken (1 for the first): bias corrections 1 - beta^step
  // When defined, used instead of lr, weight_decay and step: `counters` float64 [4] (element 0: the
  // steps taken so far, incremented by this call; 1..3: set to the step's AdamWScale), `lr_wd`
  // float64 [2] {lr, weight_decay}.
  Tensor counters, lr_wd;
};

void adamw_step_(const std::vector<AdamWParamStep>& params, double beta1, double beta2, double eps);

}  // namespace tg
