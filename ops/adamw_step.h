// adamw_step_: the fused AdamW update of a list of parameters, in place and not differentiable
// (torch's _fused_adamw_), what optim::AdamW calls once a step. Per element the formula of
// adamw_update (ops/adamw_step_kernels.h), per tensor its own lr, weight decay and step count.
// Backends, dtypes and traces: docs/api.md.
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
