#include "train/train_log.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "io/number.h"

namespace tg::train {
namespace {

const char* const kColumns[] = {"epoch", "loss", "learning_rate", "grad_norm", "tokens_per_second",
                                "eval_loss", "eval_perplexity", "eval_tokens"};

std::string clock_str(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%02d:%02d", s / 60, s % 60);
  return buf;
}

// The step of a kept row; -1 for one that is not a row.
int64_t csv_step(const std::string& line) {
  return io::parse_integer<int64_t>(std::string_view(line).substr(0, line.find(','))).value_or(-1);
}
int64_t jsonl_step(const std::string& line) {
  try {
    const json::Value v = json::parse(line);
    return v.find("step") ? v.at("step").as_int("step") : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

// Rewrites `path` with the header (if any) and the rows of steps <= keep_until, opens it to append.
void open_log(std::ofstream& out, const std::string& path, const std::string& header, int64_t keep_until,
              int64_t (*step_of)(const std::string&)) {
  std::string kept = header.empty() ? "" : header + "\n";
  if (keep_until > 0) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const int64_t s = step_of(line);
      if (s >= 0 && s <= keep_until) kept += line + "\n";
    }
  }
  io::write_file_atomic(path, kept);
  out.open(path, std::ios::app);
  TG_CHECK(out.good(), "Trainer", "cannot write the log '", path, "'");
}

}  // namespace

const char* TrainLog::csv_header() {
  return "step,epoch,loss,learning_rate,grad_norm,tokens_per_second,eval_loss,eval_perplexity,eval_tokens";
}

TrainLog::TrainLog(const std::string& dir, int64_t max_steps, int64_t keep_until, bool live)
    : max_steps_(max_steps), live_(live && isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()) {
  if (dir.empty()) return;
  std::filesystem::create_directories(dir);
  open_log(csv_, dir + "/log.csv", csv_header(), keep_until, csv_step);
  open_log(jsonl_, dir + "/log.jsonl", "", keep_until, jsonl_step);
}

void TrainLog::step(int64_t step, double loss, double lr, int64_t tokens) {
  if (first_step_ < 0) first_step_ = step, start_ = std::chrono::steady_clock::now();
  tokens_ += tokens;
  if (!live_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double done = static_cast<double>(step - first_step_ + 1);
  const double eta = elapsed / done * static_cast<double>(max_steps_ - step);
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | %s elapsed, ETA %s",
                static_cast<long long>(step), static_cast<long long>(max_steps_), loss, lr,
                elapsed > 0 ? static_cast<double>(tokens_) / elapsed : 0.0, clock_str(elapsed).c_str(),
                clock_str(eta).c_str());
  std::cerr << "\r\033[2K" << line << std::flush;
  drawn_ = true;
}

void TrainLog::log(const LogEntry& entry) {
  if (csv_) {
    csv_ << entry.step;
    for (const char* c : kColumns) {
      csv_ << ",";
      if (entry.has(c)) {
        std::ostringstream v;
        v.precision(9);
        v << entry.at(c);
        csv_ << v.str();
      }
    }
    csv_ << "\n" << std::flush;
  }
  if (jsonl_) jsonl_ << entry.json() << "\n" << std::flush;
  note(console_line(entry));
}

std::string TrainLog::console_line(const LogEntry& entry) {
  // Five significant digits (the files keep every bit); the epoch last.
  auto value = [](const std::string& key, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | %s %.5g", key.c_str(), v);
    return std::string(buf);
  };
  std::string line = "step " + std::to_string(entry.step);
  for (const auto& [k, v] : entry.values)
    if (k != "epoch") line += value(k, v);
  if (entry.has("epoch")) line += value("epoch", entry.at("epoch"));
  return line;
}

void TrainLog::note(const std::string& line) {
  clear_live_line();
  std::cout << line << "\n" << std::flush;
}

void TrainLog::clear_live_line() {
  if (drawn_) std::cerr << "\r\033[2K" << std::flush;
  drawn_ = false;
}

void TrainLog::finish() {
  if (drawn_) std::cerr << "\n" << std::flush;
  drawn_ = false;
  if (csv_) csv_.flush();
  if (jsonl_) jsonl_.flush();
}

}  // namespace tg::train
