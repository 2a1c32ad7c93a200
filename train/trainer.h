// train::Trainer: the fine-tuning loop of transformers' Trainer over a tapegrad causal LM.
//
//   auto model = tg::nn::from_pretrained("TinyLlama-folder");
//   tg::peft::apply_lora(*model, lora);
//   auto tok = tg::data::Tokenizer::from_pretrained("TinyLlama-folder");
//   auto rows = std::make_shared<tg::data::SequenceDataset>(tg::data::tokenize_jsonl_file("train.jsonl", tok), 256,
//                                                           tg::data::Layout::Pack, *tok.eos_token_id());
//   auto [val, train] = rows->split(0.1);
//   tg::train::Trainer trainer(model, std::make_shared<tg::data::SequenceDataset>(train),
//                              {.output_dir = "out", .learning_rate = 2e-4, .max_steps = 300, .eval_steps = 100},
//                              std::make_shared<tg::data::SequenceDataset>(val));
//   trainer.train();
//   trainer.save_model();   // out/adapter_model.safetensors + adapter_config.json (peft's format)
//
// A step: gradient_accumulation_steps micro-batches of per_device_train_batch_size rows (the
// dataset's seeded order: data::SequenceDataset::batch), each weighted by its target tokens (the
// step's loss is the mean over all of them), clipping to max_grad_norm, AdamW, the schedule. On a
// GPU the step is replayed as a CUDA graph where it can be (TrainingArguments::cuda_graph).
//
// Logs: every logging_steps a row (loss, learning_rate, grad_norm, tokens_per_second) printed and
// appended to <output_dir>/log.csv and log.jsonl, evaluations too, and <output_dir>/loss.svg, the
// loss curve of the whole run (train/train_log.h).
//
// bf16 (peft's mixed precision): the Trainer casts the frozen base to bfloat16 and keeps the
// trainable weights (and so their gradients and AdamW's state) in float32.
//
// Checkpoints: <output_dir>/checkpoint-<step> every save_steps, at the end and when a callback
// stops the run (train/checkpoint.h); save_total_limit keeps the newest. A resumed run
// (resume_from_checkpoint) continues bit for bit as the uninterrupted one: the trainable weights,
// AdamW's state, the default generator (dropout) and the step (which fixes the data position and
// the schedule) come back. It refuses, naming each, changed arguments that decide the numbers
// (TrainingArguments::resume_fixed_fields) and training data other than the checkpoint's (a
// fingerprint of its rows). max_steps may grow: a finished run is extended, and the schedule is
// re-planned as transformers does, i.e. the learning rate from the checkpoint's step on is that of
// the schedule over the new max_steps (linear and cosine then rise again from where the shorter
// run had decayed to).
//
// Data parallelism: started as a rank (examples/launch, torchrun), the Trainer joins the group on
// its GPU; each rank takes its share of every global batch of per_device_train_batch_size x world
// rows, gradients are averaged (distributed::DataParallel), rank 0 logs and writes. A global batch
// is the same on any world size, so a checkpoint resumes on another number of GPUs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "distributed/communicator.h"
#include "distributed/data_parallel.h"
#include "nn/causal_lm.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "train/callbacks.h"
#include "train/data_fingerprint.h"
#include "train/training_arguments.h"

namespace tg::train {

class GraphedStep;
class TrainLog;

struct TrainOutput {
  int64_t global_step = 0;
  double training_loss = 0;  // the mean loss of the steps this call ran (NaN when it ran none)
};

class Trainer {
 public:
  // Moves the model to the device (the GPU unless use_cpu), enables gradient checkpointing if
  // asked, and makes the optimizer over its trainable parameters. tg::Error naming the argument
  // that is invalid, or when the model has nothing to train or the datasets no rows.
  Trainer(std::shared_ptr<nn::CausalLM> model, std::shared_ptr<const data::SequenceDataset> train_dataset,
          TrainingArguments args, std::shared_ptr<const data::SequenceDataset> eval_dataset = nullptr);
  ~Trainer();

  // Trains up to max_steps (from the checkpoint of resume_from_checkpoint, if any).
  TrainOutput train();
  // The loss over every row of the eval dataset (or of `dataset`), weighted by target tokens (the
  // mean over every token scored): "eval_loss", "eval_perplexity" (exp of it), "eval_tokens", the
  // prefix "eval" being metric_key_prefix (transformers' evaluate). Logged (also after train())
  // and passed to on_evaluate. The model's training mode is restored after.
  LogEntry evaluate(std::shared_ptr<const data::SequenceDataset> dataset = nullptr,
                    const std::string& metric_key_prefix = "eval");
  // A LoRA model's adapter in peft's format (adapter_model.safetensors + adapter_config.json,
  // PeftModel.from_pretrained loads it), else the model as save_pretrained writes it. dir "":
  // output_dir.
  void save_model(const std::string& dir = "");

  void add_callback(std::shared_ptr<TrainerCallback> callback) { callbacks_.push_back(std::move(callback)); }
  // The LoraConfig save_model writes (base_model_name_or_path, modules_to_save). Without it the
  // Trainer reads r, lora_alpha, lora_dropout and the targets from the model's LoRA layers.
  void set_lora_config(peft::LoraConfig config) { lora_config_ = std::move(config); }
  // Data parallelism over `comm` (the group must outlive the Trainer); call before train(). A
  // process started by a launcher trains on its LOCAL_RANK's GPU and joins the group itself when
  // train() starts, unless given one here (a program with several Trainers shares one group).
  void use_communicator(distributed::Communicator& comm);

  const TrainingArguments& args() const { return args_; }
  const TrainerState& state() const { return state_; }
  nn::CausalLM& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  Device device() const { return device_; }
  bool uses_cuda_graph() const { return use_graph_; }

 private:
  struct StepResult;
  StepResult run_step(int64_t step, GraphedStep& graphed);
  int64_t resume();
  void save_checkpoint(int64_t step);
  peft::LoraConfig lora_config();
  void log(const LogEntry& entry);
  TrainLog& train_log();
  void write_loss_curve() const;
  data::Batch shard(const data::Batch& global) const;
  double epoch_at(int64_t step) const;
  bool main_process() const { return rank_ == 0; }
  std::vector<double> sum_over_ranks(std::vector<double> values) const;
  const DataFingerprint& train_fingerprint();

  std::shared_ptr<nn::CausalLM> model_;
  std::shared_ptr<const data::SequenceDataset> train_, eval_;
  TrainingArguments args_;
  Device device_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::vector<double> base_lrs_;
  std::vector<std::shared_ptr<TrainerCallback>> callbacks_;
  std::optional<peft::LoraConfig> lora_config_;
  std::optional<DataFingerprint> fingerprint_;
  std::unique_ptr<distributed::Communicator> own_comm_;
  distributed::Communicator* comm_ = nullptr;
  std::unique_ptr<distributed::DataParallel> dp_;
  int rank_ = 0, world_ = 1;
  bool use_graph_ = false;
  TrainerState state_;
  std::unique_ptr<TrainLog> log_;  // the files of output_dir, opened by train() or the first log
};

}  // namespace tg::train
