// The learning-rate multipliers of transformers' get_scheduler, as functions of the step (what a
// checkpoint needs to resume a schedule is then the step alone).
#pragma once

#include <cstdint>
#include <string>

namespace tg::train {

// tg::Error unless `type` is "linear", "cosine", "constant" or "constant_with_warmup".
void check_schedule_type(const std::string& type);
// tg::Error (naming TrainingArguments' warmup_steps and `steps_from`) unless warmup < max_steps.
void check_warmup(int64_t warmup_steps, int64_t max_steps, const char* steps_from);

// The multiplier of the base learning rate after `step` optimizer steps (torch's LambdaLR: step 0
// is the first update's), as transformers' schedules: linear and cosine rise linearly over the
// warmup and then fall to 0 at max_steps (held at 0 after it); constant_with_warmup rises and
// stays at 1; constant is 1.
double lr_factor(const std::string& type, int64_t step, int64_t warmup_steps, int64_t max_steps);

}  // namespace tg::train
