// train::TrainingArguments: the settings of a train::Trainer run, named and defaulted as
// transformers' TrainingArguments (the subset tapegrad implements, plus cuda_graph).
//
//   tg::train::TrainingArguments args{.output_dir = "out/run", .learning_rate = 2e-4,
//                                     .max_steps = 300, .per_device_train_batch_size = 8};
//
// validate() checks every field and names the one that is wrong; the Trainer calls it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/json.h"
#include "nn/module.h"

namespace tg::train {

struct TrainingArguments {
  std::string output_dir = "trainer_output";  // checkpoints, logs and (by default) the saved model
  // A fresh run (no resume_from_checkpoint) into an output_dir holding another run's checkpoints,
  // logs or saved model is refused unless this is true, which removes them first. A run holds the
  // folder locked while it lives (train/output_dir.h): a second one into it fails at once.
  bool overwrite_output_dir = false;
  // AdamW (torch.optim.AdamW); weight decay skips biases and norm weights, as transformers does.
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  // "linear" (warmup, then down to 0 at max_steps), "cosine" (warmup, half cosine to 0),
  // "constant", "constant_with_warmup": transformers' get_scheduler.
  std::string lr_scheduler_type = "linear";
  int64_t warmup_steps = 0;  // must be < max_steps: a run that ends in its warmup is refused
  // Optimizer steps; -1: num_train_epochs passes over the training rows (rounded up to steps). At
  // most kMaxSteps either way, and the batch sizes at most kMaxBatch (core/limits.h).
  int64_t max_steps = -1;
  double num_train_epochs = 3.0;
  int64_t per_device_train_batch_size = 8;
  int64_t per_device_eval_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  double max_grad_norm = 1.0;  // clipping by global norm; 0: no clipping (and no grad_norm logged)
  // Mixed precision as peft's default: the Trainer casts the frozen base to bfloat16 and keeps the
  // trainable weights (so their gradients and AdamW's state) in float32; a 4-bit layer's
  // quantisation state stays float32. Full fine-tuning (nothing frozen) is refused: cast the model
  // to tg::kBFloat16 yourself and leave bf16 false.
  bool bf16 = false;
  bool gradient_checkpointing = false;  // recompute each layer at backward: less memory, same gradients
  // {.offload_activations = true}: the layers' checkpointed inputs in host memory until backward
  // (long sequences on one GPU; refused before the first step when the host has too little memory).
  nn::GradientCheckpointingKwargs gradient_checkpointing_kwargs = {};
  int64_t logging_steps = 500;  // a log row (loss, learning_rate, grad_norm, tokens/s) every N steps
  int64_t eval_steps = 0;       // evaluate every N steps (0: never during train())
  int64_t save_steps = 500;     // a checkpoint every N steps (0: only at the end of train())
  int64_t save_total_limit = 0; // keep the newest N checkpoints (0: all)
  // "" (start afresh), "latest" (the newest complete checkpoint of output_dir), or a checkpoint
  // folder (output_dir/checkpoint-<step>, also of another output_dir).
  std::string resume_from_checkpoint = "";
  int64_t seed = 42;  // the data order and the default generator (dropout)
  bool use_cpu = false;  // else the GPU when there is one
  bool disable_tqdm = false;  // no live progress line (it is drawn only when stderr is a terminal)
  // tapegrad's own: "auto" | "on" | "off": replay the step as a CUDA graph on the GPU (auto: LoRA
  // on a family checked under capture (Architecture::cuda_graph_validated), one micro-batch, no
  // LoRA dropout, no checkpointing, one process).
  std::string cuda_graph = "auto";

  // tg::Error naming the first field that is out of range (NaN and infinities included).
  void validate() const;
  // Every field, by name (what a checkpoint records).
  json::Value to_json() const;
  // The fields a resumed run must keep for the resume to continue bit-exactly.
  static const std::vector<std::string>& resume_fixed_fields();
};

// The optimizer steps of num_train_epochs passes over `rows` training rows, as transformers counts
// them when max_steps is -1: whole micro-batches of global_batch rows an epoch (at least one),
// whole steps of gradient_accumulation_steps of those, times the epochs rounded up.
int64_t steps_for_epochs(double num_train_epochs, int64_t rows, int64_t global_batch, int64_t gradient_accumulation_steps);

// tg::Error (naming warmup_steps and `steps_from`) unless warmup_steps < max_steps.
void check_warmup(int64_t warmup_steps, int64_t max_steps, const char* steps_from);

}  // namespace tg::train
