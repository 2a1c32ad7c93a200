// Learning-rate schedules: transformers' get_scheduler types as functions of the step (what a
// checkpoint needs to resume a schedule is then the step alone), and torch's LambdaLR-style object.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace tg::optim {

// tg::Error unless `type` is "linear", "cosine", "constant" or "constant_with_warmup".
void check_schedule_type(const std::string& type);

// The multiplier of the base learning rate after `step` optimizer steps (step 0 is the first
// update's), as transformers' schedules: linear and cosine rise linearly over the warmup and then
// fall to 0 at max_steps (held at 0 after it); constant_with_warmup rises and stays at 1; constant is 1.
double lr_factor(const std::string& type, int64_t step, int64_t warmup_steps, int64_t max_steps);

// The multiplier of transformers' get_cosine_schedule_with_warmup at `step`: step / warmup
// during warmup, then a half cosine from 1 down to min_lr_ratio at total_steps (held there
// afterwards, where transformers would rise again).
double warmup_cosine_factor(int64_t step, int64_t warmup_steps, int64_t total_steps, double min_lr_ratio = 0.0);

// Sets each parameter group's lr to its base lr * warmup_cosine_factor(step) (base lr: the lr the
// group had when the schedule was made). The constructor applies step 0; call step() after each
// optimizer.step(), like torch's LambdaLR.
class WarmupCosineLR {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr_ratio = 0.0);
  void step();
  // The first group's lr set last (every group's: optimizer.param_groups()).
  double get_last_lr() const { return last_lr_; }
  int64_t last_step() const { return step_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // Resume at a given step (e.g. after loading a checkpoint).
  void set_step(int64_t step);

 private:
  Optimizer* opt_;
  int64_t warmup_, total_, step_ = 0;
  double min_ratio_, last_lr_ = 0;
  std::vector<double> base_lrs_;  // per group
};

}  // namespace tg::optim
