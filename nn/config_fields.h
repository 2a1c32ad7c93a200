// config.json's fields as a family's config reader (nn/architecture.h) sees them, every error naming the
// file, the field and its value. Absent and null fields take transformers' defaults
// (save_pretrained leaves out some values equal to them).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "io/json.h"

namespace tg::nn {

class ConfigFields {
 public:
  // Every size is at most this (int32's range, as in transformers' checkpoints), so products of two
  // sizes cannot overflow; tensors too large to allocate are refused when built.
  static constexpr int64_t kMaxSize = INT32_MAX;

  ConfigFields(json::Value v, std::string source) : v_(std::move(v)), source_(std::move(source)) {}
  const std::string& source() const { return source_; }
  const json::Value& json() const { return v_; }

  const json::Value* get(const std::string& key) const;  // nullptr when absent or null
  // A size or count in [lo, kMaxSize]: checked before any arithmetic uses it.
  int64_t integer(const std::string& key, int64_t fallback, int64_t lo = 1) const;
  // A finite number in [lo, hi].
  double number(const std::string& key, double fallback, double lo = 0, double hi = HUGE_VAL) const;
  // A dropout probability: [0, 1), as the attention kernels take it (1 would drop everything).
  double probability(const std::string& key, double fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  // A field whose value would change the computation in a way tapegrad does not implement.
  [[noreturn]] void unsupported(const std::string& key, const std::string& wanted) const;
  [[noreturn]] void bad(const std::string& key, const std::string& wanted) const;

 private:
  json::Value v_;
  std::string source_;
};

}  // namespace tg::nn
