// The Trainer's logs: every LogEntry as a row of <dir>/log.csv and a line of <dir>/log.jsonl
// (transformers' log_history), printed as a line on stdout (console_line), and while stderr is a
// terminal a live progress line there (step, loss, lr, tokens/s, elapsed, ETA), redrawn each step.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include "train/callbacks.h"

namespace tg::train {

class TrainLog {
 public:
  // dir "": print only (a rank other than 0). keep_until > 0 continues the files of an earlier
  // run: its rows up to that step stay, later ones (steps being redone) go; 0 starts them afresh.
  TrainLog(const std::string& dir, int64_t max_steps, int64_t keep_until, bool live);

  // One optimizer step done over `tokens` tokens: redraws the live line.
  void step(int64_t step, double loss, double lr, int64_t tokens);
  void log(const LogEntry& entry);
  // A line of text of its own, without breaking the live line.
  void note(const std::string& line);
  // Ends the live line and flushes the files.
  void finish();
  static const char* csv_header();
  // "step 10 | learning_rate 0.0002 | loss 2.3141 | ... | epoch 0.5": a row as printed.
  static std::string console_line(const LogEntry& entry);

 private:
  void clear_live_line();
  int64_t max_steps_, first_step_ = -1, tokens_ = 0;
  bool live_, drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::ofstream csv_, jsonl_;
};

}  // namespace tg::train
