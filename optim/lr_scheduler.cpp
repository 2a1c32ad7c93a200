#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tg::optim {

void check_schedule_type(const std::string& type) {
  TG_CHECK(type == "linear" || type == "cosine" || type == "constant" || type == "constant_with_warmup",
           "TrainingArguments", "lr_scheduler_type must be 'linear', 'cosine', 'constant' or 'constant_with_warmup', ",
           "got '", type, "'");
}

double lr_factor(const std::string& type, int64_t step, int64_t warmup, int64_t max_steps) {
  check_schedule_type(type);
  TG_CHECK(step >= 0 && warmup >= 0 && max_steps >= 1, "lr_factor", "wants step >= 0, warmup_steps >= 0 and ",
           "max_steps >= 1, got ", step, ", ", warmup, ", ", max_steps);
  if (type == "constant") return 1.0;
  if (step < warmup) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
  if (type == "constant_with_warmup") return 1.0;
  if (type == "cosine") return warmup_cosine_factor(step, warmup, max_steps);
  const int64_t left = std::max<int64_t>(0, max_steps - step);
  return static_cast<double>(left) / static_cast<double>(std::max<int64_t>(1, max_steps - warmup));
}

double warmup_cosine_factor(int64_t step, int64_t warmup, int64_t total, double min_ratio) {
  TG_CHECK(warmup >= 0 && total >= 0 && step >= 0, "warmup_cosine_factor", "steps must be >= 0, got step ", step,
           ", warmup ", warmup, ", total ", total);
  if (step < warmup) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
  double progress = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  progress = std::min(progress, 1.0);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return min_ratio + (1.0 - min_ratio) * cosine;
}

WarmupCosineLR::WarmupCosineLR(Optimizer& opt, int64_t warmup, int64_t total, double min_ratio)
    : opt_(&opt), warmup_(warmup), total_(total), min_ratio_(min_ratio) {
  for (const ParamGroup& g : opt.param_groups()) base_lrs_.push_back(g.lr);
  TG_CHECK(min_ratio >= 0 && min_ratio <= 1, "WarmupCosineLR", "min_lr_ratio must be in [0, 1], got ", min_ratio);
  TG_CHECK(warmup >= 0 && total >= warmup, "WarmupCosineLR", "wants 0 <= warmup_steps <= total_steps, got ", warmup,
           " and ", total);
  set_step(0);
}

void WarmupCosineLR::set_step(int64_t step) {
  step_ = step;
  const double factor = warmup_cosine_factor(step_, warmup_, total_, min_ratio_);
  std::span<ParamGroup> groups = opt_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = base_lrs_[g] * factor;
  last_lr_ = groups[0].lr;
}

void WarmupCosineLR::step() { set_step(step_ + 1); }

}  // namespace tg::optim
