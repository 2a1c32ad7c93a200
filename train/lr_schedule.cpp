#include "train/lr_schedule.h"

#include <algorithm>

#include "core/error.h"
#include "optim/lr_scheduler.h"

namespace tg::train {

void check_schedule_type(const std::string& type) {
  TG_CHECK(type == "linear" || type == "cosine" || type == "constant" || type == "constant_with_warmup",
           "TrainingArguments", "lr_scheduler_type must be 'linear', 'cosine', 'constant' or 'constant_with_warmup', ",
           "got '", type, "'");
}

void check_warmup(int64_t warmup_steps, int64_t max_steps, const char* steps_from) {
  TG_CHECK(warmup_steps < max_steps, "TrainingArguments", "warmup_steps ", warmup_steps, " >= ", steps_from, " ", max_steps,
           ": the run would end inside its warmup, at or below the peak learning_rate and never decaying (lower warmup_steps or raise max_steps)");
}

double lr_factor(const std::string& type, int64_t step, int64_t warmup, int64_t max_steps) {
  check_schedule_type(type);
  TG_CHECK(step >= 0 && warmup >= 0 && max_steps >= 1, "lr_factor", "wants step >= 0, warmup_steps >= 0 and ",
           "max_steps >= 1, got ", step, ", ", warmup, ", ", max_steps);
  if (type == "constant") return 1.0;
  if (step < warmup) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
  if (type == "constant_with_warmup") return 1.0;
  if (type == "cosine") return optim::warmup_cosine_factor(step, warmup, max_steps);
  const int64_t left = std::max<int64_t>(0, max_steps - step);
  return static_cast<double>(left) / static_cast<double>(std::max<int64_t>(1, max_steps - warmup));
}

}  // namespace tg::train
