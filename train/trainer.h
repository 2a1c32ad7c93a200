// train::Trainer: the fine-tuning loop of transformers' Trainer over a tapegrad causal LM: a step
// of gradient_accumulation_steps micro-batches (each weighted by its target tokens), clipping,
// AdamW and the schedule (replayed as a CUDA graph on a GPU where it can be); logs to
// <output_dir>/log.csv, log.jsonl and loss.svg; checkpoints that resume bit for bit (refusing
// changed arguments or data); data parallelism when started as a rank. docs/trainer.md tells it
// whole, with a script; README.md has a complete one.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "distributed/communicator.h"
#include "distributed/data_parallel.h"
#include "nn/models/causal_lm.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "train/callbacks.h"
#include "train/data_fingerprint.h"
#include "train/training_arguments.h"

namespace tg::train {

class GraphedStep;
class OutputDirLock;
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
  virtual ~Trainer();

  // Trains up to max_steps (from the checkpoint of resume_from_checkpoint, if any). The first
  // write to output_dir (here, or an evaluate() or save_model() before) locks the folder for the
  // Trainer's life and, for a fresh run, refuses one holding another run's files unless
  // overwrite_output_dir (train/output_dir.h). tg::Error when no step of the run had a target
  // token (every label -100): nothing was trained.
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

 protected:
  // The loop for another objective over data of its own (DPOTrainer, KTOTrainer, GRPOTrainer, as
  // TRL's trainers derive from transformers'): the subclass overrides run_step and the data hooks
  // below. `name` names it in errors.
  Trainer(std::shared_ptr<nn::CausalLM> model, TrainingArguments args, const char* name);

  struct StepResult {
    double loss = NAN;  // NaN: nothing to learn in the step (no update)
    Tensor grad_norm;   // undefined without clipping
    int64_t tokens = 0; // the tokens the step read (tokens_per_second)
    std::map<std::string, double> metrics;  // logged by name, averaged over the steps of a log row
  };
  // One optimizer step at the schedule's learning rate (set before the call); the default trains
  // the causal LM loss over the train_dataset.
  virtual StepResult run_step(int64_t step);
  // The examples an epoch counts (max_steps from num_train_epochs, the epoch logged).
  virtual int64_t train_rows() const;
  // The training data in a few words for the run's first line: "27 rows of 64 tokens".
  virtual std::string describe_train_data() const;
  // The fingerprint a checkpoint keeps of the training data (a resume over other data is refused).
  virtual DataFingerprint compute_train_fingerprint() const;
  // The objective's own settings (beta, loss_type, ...): a checkpoint keeps them and a resume must
  // use the same. Null for the causal LM loss.
  virtual json::Value objective_config() const;
  // Why the step cannot be replayed as a CUDA graph ("" when it can).
  virtual std::string cuda_graph_blocker() const;
  // At eval_steps: evaluate() when there is an eval dataset.
  virtual void evaluate_in_training();

  // zero_grad, then for each micro-batch k loss_of(k).backward() weighted by weight_of(k) (times
  // the world size under data parallelism, whose gradients are averaged; an undefined loss adds
  // nothing), the ranks' gradients summed, clipping, the update. Reads nothing on the host.
  // Returns each micro-batch's loss (as loss_of gave it), then the gradient norm (undefined
  // without clipping).
  std::vector<Tensor> optimizer_step(size_t micro_batches, const std::function<Tensor(size_t)>& loss_of,
                                     const std::function<double(size_t)>& weight_of);
  // A loss with what to log of it (by name).
  using Metrics = std::map<std::string, double>;
  using LossOf = std::function<Tensor(size_t micro_batch, Metrics& metrics)>;
  // optimizer_step over micro-batches of equal weight: the step's loss is their losses' mean,
  // its metrics the means of theirs.
  StepResult mean_step(size_t micro_batches, const LossOf& loss_of);
  // An evaluation over `rows` rows in batches of per_device_eval_batch_size, in eval mode under
  // no-grad: loss_of(rows of a batch) -> its loss (0-d) and metrics; their means weighted by the
  // batches' rows are logged as "<prefix>_loss", "<prefix>_<metric>" and passed to on_evaluate.
  LogEntry evaluate_rows(int64_t rows, const std::function<Tensor(std::span<const int64_t>, Metrics&)>& loss_of,
                         const std::string& prefix);
  void log(const LogEntry& entry);
  // Logs an evaluation's metrics and passes them to the callbacks' on_evaluate.
  void report_evaluation(const LogEntry& metrics);
  TrainLog& train_log();
  bool main_process() const { return rank_ == 0; }
  std::vector<double> sum_over_ranks(std::vector<double> values) const;

  std::shared_ptr<nn::CausalLM> model_;
  TrainingArguments args_;
  Device device_;
  int rank_ = 0, world_ = 1;
  TrainerState state_;

 private:
  std::vector<Tensor> device_step(std::span<const data::Batch> micro, int64_t targets);
  int64_t resume();
  void save_checkpoint(int64_t step);
  peft::LoraConfig lora_config();
  void claim_output_dir();
  void write_loss_curve() const;
  data::Batch shard(const data::Batch& global) const;
  double epoch_at(int64_t step) const;
  // tg::Error naming the batch size whose rows, over `world` ranks, would not fit the host's memory.
  void check_batch_memory(int64_t world) const;
  const DataFingerprint& train_fingerprint();
  void setup(const char* name);

  std::shared_ptr<const data::SequenceDataset> train_, eval_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::vector<double> base_lrs_;
  std::vector<std::shared_ptr<TrainerCallback>> callbacks_;
  std::optional<peft::LoraConfig> lora_config_;
  std::optional<DataFingerprint> fingerprint_;
  std::unique_ptr<distributed::Communicator> own_comm_;
  distributed::Communicator* comm_ = nullptr;
  std::unique_ptr<distributed::DataParallel> dp_;
  bool use_graph_ = false;
  std::unique_ptr<GraphedStep> graphed_;  // the LM step, made by train()
  std::unique_ptr<TrainLog> log_;  // the files of output_dir, opened by train() or the first log
  std::shared_ptr<OutputDirLock> output_lock_;  // held from the first write to output_dir
};

}  // namespace tg::train
