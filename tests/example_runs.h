// What the tests of the example programs share: the tiny transformers folders of
// tests/fixtures/tokenizers, running a program and reading what it wrote (its log.csv).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace tg::test {

namespace fs = std::filesystem;

inline fs::path fixtures() {
  const char* env = std::getenv("TG_TOKENIZER_FIXTURES");
  return env && *env ? fs::path(env) : fs::path(TG_TESTS_DIR) / "fixtures" / "tokenizers";
}

inline std::string read(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write(const std::string& path, const std::string& content) { std::ofstream(path, std::ios::binary) << content; }

// Runs an example program; returns its exit status, its output in `log` (stdout and stderr, or
// stdout alone, stderr going to dir/err.txt).
inline int run(const std::string& program, const std::string& args, const TempDir& dir, std::string* log = nullptr,
        bool with_stderr = true) {
  const std::string out = dir / "log.txt";
  const std::string err = with_stderr ? std::string(" 2>&1") : " 2>" + (dir / "err.txt");
  const int rc = std::system((program + " " + args + " >" + out + err).c_str());
  if (log) *log = read(out);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Runs lora_finetune, as run().
inline int finetune(const std::string& args, const TempDir& dir, std::string* log = nullptr) {
  return run(TG_LORA_FINETUNE, args, dir, log);
}

// A small JSONL task: the completion follows from the prompt.
inline std::string write_task(const TempDir& dir, int lines = 120) {
  const char* names[] = {"alice", "bob", "carol", "dave", "erin"};
  const char* colours[] = {"red", "green", "blue", "black"};
  std::string text;
  for (int i = 0; i < lines; ++i)
    text += std::string("{\"prompt\": \"Q: what does ") + names[i % 5] + " like?\\nA:\", \"completion\": \" " +
            names[i % 5] + " likes " + colours[(i * 7) % 4] + ".\"}\n";
  write(dir / "train.jsonl", text);
  return dir / "train.jsonl";
}

struct LossRow {
  int64_t step;
  std::string split;  // "train" or "validation"
  double loss, tok_s;
};
// The Trainer's log.csv: step,epoch,loss,learning_rate,grad_norm,tokens_per_second,eval_loss,...
inline std::vector<LossRow> losses(const std::string& csv) {
  std::vector<LossRow> rows;
  std::istringstream in(read(csv));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    f.resize(9);
    const bool train = !f[2].empty();
    rows.push_back({std::stoll(f[0]), train ? "train" : "validation", std::stod(train ? f[2] : f[6]),
                    f[5].empty() ? 0 : std::stod(f[5])});
  }
  return rows;
}

// The train rows' losses of a log.csv, in step order.
inline std::vector<double> train_losses(const std::string& csv) {
  std::vector<double> train;
  for (const auto& r : losses(csv))
    if (r.split == "train") train.push_back(r.loss);
  return train;
}

// The mean of the first five losses minus the mean of the last five: how far training brought it down.
inline double loss_drop(const std::vector<double>& train) {
  double first = 0, last = 0;
  for (size_t i = 0; i < 5 && i < train.size(); ++i) first += train[i] / 5, last += train[train.size() - 1 - i] / 5;
  return first - last;
}

}  // namespace tg::test
