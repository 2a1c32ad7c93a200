// Benchmark rows as JSON, for bench/results/<name>.json: an array of flat objects, each naming
// the benchmark, the machine, the date and the commit it was measured on, then its own fields.
// bench/make_results.py builds bench/RESULTS.md from these files.
//   bench::JsonRows out("norm_bench", machine);
//   out.add().str("op", "rms_norm").num("us", 24.0);
//   out.write(path);   // atomically (a temporary file, then a rename)
#pragma once

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_commit.h"  // TG_BENCH_COMMIT, written at build time (bench/commit.cmake)
#include "core/cuda/runtime.h"
#include "core/device.h"

namespace tg::bench {

// `s` as a JSON string literal.
inline std::string json_quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      q += buf;
    } else {
      q += c;
    }
  }
  return q + "\"";
}

class JsonRow {
 public:
  JsonRow& str(const std::string& key, const std::string& value) { return field(key, json_quote(value)); }
  // A number with `digits` significant digits; NaN and infinities (no JSON for them) as null.
  JsonRow& num(const std::string& key, double value, int digits = 6) {
    if (!std::isfinite(value)) return field(key, "null");
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, value);
    return field(key, buf);
  }
  JsonRow& boolean(const std::string& key, bool value) { return field(key, value ? "true" : "false"); }
  std::string text() const { return "{" + body_ + "}"; }

 private:
  JsonRow& field(const std::string& key, const std::string& json) {
    body_ += (body_.empty() ? "" : ", ") + json_quote(key) + ": " + json;
    return *this;
  }
  std::string body_;
};

// Today's date (UTC) as YYYY-MM-DD.
inline std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

// The host CPU's model name (/proc/cpuinfo), or "unknown CPU".
inline std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      const size_t at = line.find_first_not_of(" \t", line.find(':') + 1);
      return at == std::string::npos ? "unknown CPU" : line.substr(at);
    }
  return "unknown CPU";
}

// What the rows name as the machine: the GPU, or the CPU.
inline std::string machine(Device device) {
#ifdef TG_WITH_CUDA
  if (device.is_cuda()) return cuda::device_name(device.index);
#endif
  return cpu_name();
}

class JsonRows {
 public:
  JsonRows(std::string bench, std::string machine) : bench_(std::move(bench)), machine_(std::move(machine)) {}
  // A new row, already naming the benchmark, machine, date and commit.
  JsonRow& add() {
    rows_.emplace_back();
    return rows_.back().str("bench", bench_).str("machine", machine_).str("date", today_utc()).str("commit",
                                                                                                  TG_BENCH_COMMIT);
  }
  // Writes the rows to `path` (nothing when empty): a temporary file, then a rename.
  void write(const std::string& path) const {
    if (path.empty()) return;
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp);
      out << "[\n";
      for (size_t i = 0; i < rows_.size(); ++i) out << "  " << rows_[i].text() << (i + 1 < rows_.size() ? ",\n" : "\n");
      out << "]\n";
      if (!out) throw std::runtime_error("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
  }

 private:
  std::string bench_, machine_;
  std::vector<JsonRow> rows_;
};

}  // namespace tg::bench
