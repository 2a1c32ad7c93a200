// What a train::Trainer tells the user's code as it runs (transformers' TrainerCallback): derive
// from TrainerCallback, override the events of interest, trainer.add_callback(...).
//
//   struct Printer : tg::train::TrainerCallback {
//     void on_log(const TrainerState& s, const LogEntry& log) override { std::cout << log.json() << "\n"; }
//   };
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tg::train {

// One row of the log history: {"loss", "learning_rate", "grad_norm", "tokens_per_second", "epoch"}
// for training rows, {"eval_loss", "eval_perplexity", "eval_tokens", "epoch"} for evaluations.
struct LogEntry {
  int64_t step = 0;
  std::map<std::string, double> values;
  bool has(const std::string& key) const { return values.count(key) != 0; }
  double at(const std::string& key) const;  // tg::Error naming the key when absent
  std::string json() const;                 // {"step": 10, "loss": 2.31, ...} on one line
};

// Where a run stands (transformers' TrainerState).
struct TrainerState {
  int64_t global_step = 0;  // optimizer steps done
  int64_t max_steps = 0;
  double epoch = 0;         // passes over the training rows so far (fractional)
  std::vector<LogEntry> log_history;
  bool is_world_process_zero = true;  // the process that logs, evaluates and saves
};

// What a callback may ask of the loop (transformers' TrainerControl).
struct TrainerControl {
  // Stop after this step; the Trainer writes a checkpoint first, so the run resumes from it
  // (a Ctrl-C flag checked in on_step_end, a time budget).
  bool should_training_stop = false;
};

class TrainerCallback {
 public:
  virtual ~TrainerCallback() = default;
  virtual void on_train_begin(const TrainerState&) {}
  // After each optimizer step (state.global_step is that step's).
  virtual void on_step_end(const TrainerState&, TrainerControl&) {}
  // A log row (training every logging_steps, or an evaluation's).
  virtual void on_log(const TrainerState&, const LogEntry&) {}
  virtual void on_evaluate(const TrainerState&, const LogEntry& /*metrics*/) {}
  // A checkpoint (or save_model's folder) was written to `dir`.
  virtual void on_save(const TrainerState&, const std::string& /*dir*/) {}
  virtual void on_train_end(const TrainerState&) {}
};

}  // namespace tg::train
