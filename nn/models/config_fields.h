// config.json's fields as a family's config reader (nn/models/architecture.h) sees them, every error naming the
// file, the field and its value. Absent and null fields take transformers' defaults
// (save_pretrained leaves out some values equal to them).
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/limits.h"
#include "io/json.h"
#include "nn/rotary.h"

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
  // A size or count in [lo, hi]: checked before any arithmetic uses it (hi: core/limits.h's bound
  // where the field has one).
  int64_t integer(const std::string& key, int64_t fallback, int64_t lo = 1, int64_t hi = kMaxSize) const;
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

// RoPE as config.json gives it in the object `r` (named `key` in errors): transformers 5's
// rope_parameters {"rope_type", "rope_theta", factors}, older versions' rope_scaling (null unless
// scaled; "type" before 4.45) beside rope_theta. theta keeps its value when `r` has no rope_theta.
// As transformers' standardize_rope_params, a top-level original_max_position_embeddings and
// partial_rotary_factor count (the first over r's, the second under it); max_position_embeddings
// is original_max_position_embeddings' last fallback.
void read_rope(const ConfigFields& f, const std::string& key, const json::Value& r, double& theta,
               RopeScaling& scaling, int64_t max_position_embeddings);
// layer_types as given: one "sliding_attention" or "full_attention" per layer (tg::Error naming the
// field otherwise); empty when absent or null.
std::vector<std::string> read_layer_types(const ConfigFields& f, int64_t layers);
// tg::Error naming partial_rotary_factor unless it is 1 (the families that rotate whole heads).
void refuse_partial_rotary(const ConfigFields& f, const RopeScaling& scaling);
// The object read_rope reads.
json::Value rope_json(double theta, const RopeScaling& scaling);

// c after c.validate(), its error prefixed with the file's name.
template <class Config>
Config validated(const ConfigFields& f, Config c) {
  try {
    c.validate();
  } catch (const Error& e) {
    fail("from_pretrained", "'", f.source(), "': ", e.what());
  }
  return c;
}

}  // namespace tg::nn
