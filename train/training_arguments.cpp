#include "train/training_arguments.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/limits.h"
#include "optim/lr_scheduler.h"

namespace tg::train {
namespace {

constexpr const char* kWhere = "TrainingArguments";

void check_finite(const char* name, double v) {
  TG_CHECK(std::isfinite(v), kWhere, name, " must be a finite number, got ", v);
}

void check_at_least(const char* name, int64_t v, int64_t least, const char* why = "") {
  TG_CHECK(v >= least, kWhere, name, " must be at least ", least, ", got ", v, why);
}

// A size every step allocates by (rows, micro-batches): bounded before anything is.
void check_size(const char* name, int64_t v, int64_t most) {
  check_at_least(name, v, 1);
  TG_CHECK(v <= most, kWhere, name, " ", v, " is above the limit ", most);
}

}  // namespace

int64_t steps_for_epochs(double num_train_epochs, int64_t rows, int64_t global_batch, int64_t accum) {
  const int64_t per_epoch = std::max<int64_t>(1, (rows + global_batch - 1) / global_batch / accum);
  const double steps = std::ceil(num_train_epochs * static_cast<double>(per_epoch));
  TG_CHECK(steps <= static_cast<double>(kMaxSteps), kWhere, "num_train_epochs ", num_train_epochs, " of ", per_epoch,
           " steps are ", steps, " steps, above the limit ", kMaxSteps, " (lower num_train_epochs, or set max_steps)");
  return static_cast<int64_t>(steps);
}

void check_warmup(int64_t warmup_steps, int64_t max_steps, const char* steps_from) {
  TG_CHECK(warmup_steps < max_steps, kWhere, "warmup_steps ", warmup_steps, " >= ", steps_from, " ", max_steps,
           ": the run would end inside its warmup, at or below the peak learning_rate and never decaying (lower "
           "warmup_steps or raise max_steps)");
}

void TrainingArguments::validate() const {
  TG_CHECK(!output_dir.empty(), kWhere, "output_dir is empty (checkpoints and logs go there)");
  check_finite("learning_rate", learning_rate);
  TG_CHECK(learning_rate > 0, kWhere, "learning_rate must be > 0, got ", learning_rate);
  check_finite("weight_decay", weight_decay);
  TG_CHECK(weight_decay >= 0, kWhere, "weight_decay must be >= 0, got ", weight_decay);
  for (auto [name, beta] : {std::pair{"adam_beta1", adam_beta1}, std::pair{"adam_beta2", adam_beta2}})
    TG_CHECK(std::isfinite(beta) && beta >= 0 && beta < 1, kWhere, name, " must be in [0, 1), got ", beta);
  check_finite("adam_epsilon", adam_epsilon);
  TG_CHECK(adam_epsilon > 0, kWhere, "adam_epsilon must be > 0, got ", adam_epsilon);
  optim::check_schedule_type(lr_scheduler_type);
  check_at_least("warmup_steps", warmup_steps, 0);
  TG_CHECK(lr_scheduler_type != "constant" || warmup_steps == 0, kWhere, "lr_scheduler_type 'constant' has no warmup, ",
           "got warmup_steps ", warmup_steps, " (use 'constant_with_warmup')");
  TG_CHECK(max_steps == -1 || max_steps >= 1, kWhere, "max_steps must be >= 1, or -1 to train num_train_epochs, got ",
           max_steps);
  TG_CHECK(max_steps <= kMaxSteps, kWhere, "max_steps ", max_steps, " is above the limit ", kMaxSteps);
  if (max_steps == -1) {
    check_finite("num_train_epochs", num_train_epochs);
    TG_CHECK(num_train_epochs > 0, kWhere, "num_train_epochs must be > 0 when max_steps is -1, got ", num_train_epochs);
    // An epoch is at least one step: more epochs than that are more steps (train() checks the product).
    TG_CHECK(num_train_epochs <= static_cast<double>(kMaxSteps), kWhere, "num_train_epochs ", num_train_epochs,
             " is above the limit ", kMaxSteps, " (max_steps' limit: an epoch is at least one step)");
  }
  if (max_steps > 0) check_warmup(warmup_steps, max_steps, "max_steps");
  check_size("per_device_train_batch_size", per_device_train_batch_size, kMaxBatch);
  check_size("per_device_eval_batch_size", per_device_eval_batch_size, kMaxBatch);
  check_size("gradient_accumulation_steps", gradient_accumulation_steps, kMaxBatch);
  check_finite("max_grad_norm", max_grad_norm);
  TG_CHECK(max_grad_norm >= 0, kWhere, "max_grad_norm must be >= 0 (0: no clipping), got ", max_grad_norm);
  check_at_least("logging_steps", logging_steps, 1);
  check_at_least("eval_steps", eval_steps, 0, " (0: no evaluation during train())");
  check_at_least("save_steps", save_steps, 0, " (0: a checkpoint only at the end)");
  check_at_least("save_total_limit", save_total_limit, 0, " (0: keep every checkpoint)");
  check_at_least("seed", seed, 0);
  TG_CHECK(gradient_checkpointing || !gradient_checkpointing_kwargs.offload_activations, kWhere,
           "gradient_checkpointing_kwargs.offload_activations offloads the checkpointed activations: it needs "
           "gradient_checkpointing");
  TG_CHECK(cuda_graph == "auto" || cuda_graph == "on" || cuda_graph == "off", kWhere,
           "cuda_graph must be 'auto', 'on' or 'off', got '", cuda_graph, "'");
}

json::Value TrainingArguments::to_json() const {
  json::Value v = json::Value::object();
  v.set("output_dir", output_dir).set("overwrite_output_dir", overwrite_output_dir).set("learning_rate", learning_rate).set("weight_decay", weight_decay);
  v.set("adam_beta1", adam_beta1).set("adam_beta2", adam_beta2).set("adam_epsilon", adam_epsilon);
  v.set("lr_scheduler_type", lr_scheduler_type).set("warmup_steps", warmup_steps).set("max_steps", max_steps);
  v.set("num_train_epochs", num_train_epochs).set("per_device_train_batch_size", per_device_train_batch_size);
  v.set("per_device_eval_batch_size", per_device_eval_batch_size);
  v.set("gradient_accumulation_steps", gradient_accumulation_steps).set("max_grad_norm", max_grad_norm);
  v.set("bf16", bf16).set("gradient_checkpointing", gradient_checkpointing).set("logging_steps", logging_steps);
  v.set("eval_steps", eval_steps).set("save_steps", save_steps).set("save_total_limit", save_total_limit);
  v.set("resume_from_checkpoint", resume_from_checkpoint).set("seed", seed).set("use_cpu", use_cpu);
  v.set("disable_tqdm", disable_tqdm).set("cuda_graph", cuda_graph);
  json::Value kwargs = json::Value::object();
  kwargs.set("offload_activations", gradient_checkpointing_kwargs.offload_activations);
  v.set("gradient_checkpointing_kwargs", kwargs);
  return v;
}

const std::vector<std::string>& TrainingArguments::resume_fixed_fields() {
  // What decides the numbers of every step; the rest (where files go, how often, max_steps,
  // which may grow: the schedule is then re-planned) may change on resume. The batch is checked as
  // the global one (per_device_train_batch_size x ranks), so a run resumes on another world size.
  static const std::vector<std::string> fields = {
      "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "lr_scheduler_type",
      "warmup_steps", "gradient_accumulation_steps", "max_grad_norm", "bf16", "seed"};
  return fields;
}

}  // namespace tg::train
