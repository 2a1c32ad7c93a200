// What keeps two runs apart in a Trainer's output_dir: one run at a time (an exclusive lock held
// while the run lives), and no fresh run over the files of another (transformers'
// overwrite_output_dir, which removes them first).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tg::train {

inline constexpr const char* kLockFile = ".trainer.lock";

// <dir>/.trainer.lock held with an exclusive flock while this lives (the file records the holder's
// pid): a second process asking for it gets a tg::Error at once naming the folder and that pid.
// Within one process the hold is shared: acquiring it again returns the same one. The lock goes
// with the process, however it ends.
class OutputDirLock {
 public:
  static std::shared_ptr<OutputDirLock> acquire(const std::string& dir);
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

 private:
  OutputDirLock(std::string key, int fd) : key_(std::move(key)), fd_(fd) {}
  std::string key_;
  int fd_;
};

// What `dir` holds of an earlier run, sorted: checkpoint-<step> folders, the logs (log.csv,
// log.jsonl, loss.svg), a saved adapter or model, and the entries named in `also` (a program's
// own outputs there, e.g. lora_finetune's "adapter").
std::vector<std::string> previous_run_files(const std::string& dir, const std::vector<std::string>& also = {});

// Removes those entries (names in `dir`, as previous_run_files gives them).
void remove_run_files(const std::string& dir, const std::vector<std::string>& names);

// Before a fresh run (no resume_from_checkpoint) into `dir`: tg::Error naming what it holds of
// another run and the two ways out, unless overwrite_output_dir, which removes those first.
void prepare_fresh_output_dir(const std::string& dir, bool overwrite_output_dir);

}  // namespace tg::train
