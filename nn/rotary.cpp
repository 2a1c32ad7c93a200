#include "nn/rotary.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/embedding.h"
#include "ops/apply_rotary.h"
#include "ops/shape.h"

namespace tg::nn {
namespace {

// transformers' _compute_llama3_parameters, in float32 as it computes them.
void llama3_scale(std::vector<float>& inv_freq, const RopeScaling& s) {
  const auto factor = static_cast<float>(s.factor), low = static_cast<float>(s.low_freq_factor),
             high = static_cast<float>(s.high_freq_factor);
  const auto old_context = static_cast<float>(s.original_max_position_embeddings);
  const float low_wavelen = old_context / low, high_wavelen = old_context / high;
  for (float& f : inv_freq) {
    const float wavelen = 2 * std::numbers::pi_v<float> / f;
    if (wavelen > low_wavelen) {
      f /= factor;
    } else if (!(wavelen < high_wavelen)) {  // the ramp between the two
      const float smooth = (old_context / wavelen - low) / (high - low);
      f = (1 - smooth) * f / factor + smooth * f;
    }
  }
}

// transformers' _compute_yarn_parameters: float32 as torch computes it, the bounds in float64.
std::vector<float> yarn_inv_freq(int64_t dim, double theta, double factor, const RopeScaling& s) {
  const int64_t half = dim / 2;
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) *
           std::log(static_cast<double>(s.original_max_position_embeddings) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // no singularity
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float pos = std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolation = 1.0f / pos, interpolation = 1.0f / (static_cast<float>(factor) * pos);
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low),
                                  0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the share of the unscaled frequency
    inv_freq[i] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
  return inv_freq;
}

// transformers' _compute_longrope_parameters: 1 / (factor[i] * theta^(2i/dim)) in float32.
std::vector<float> longrope_inv_freq(int64_t dim, double theta, const std::vector<double>& factors) {
  std::vector<float> inv_freq(factors.size());
  for (size_t i = 0; i < factors.size(); ++i)
    inv_freq[i] = 1.0f / (static_cast<float>(factors[i]) *
                          std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(dim)));
  return inv_freq;
}

// yarn's and longrope's factor when config.json gives none: the context's growth.
double context_factor(const RopeScaling& s, int64_t max_positions) {
  return s.factor > 0 ? s.factor
                      : static_cast<double>(max_positions) / static_cast<double>(s.original_max_position_embeddings);
}

// What cos and sin are multiplied by (transformers' attention_scaling).
double attention_scaling(const RopeScaling& s, int64_t max_positions) {
  if (s.attention_factor > 0) return s.attention_factor;
  const double factor = context_factor(s, max_positions);
  if (s.rope_type == "yarn") {
    auto mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
    return s.mscale > 0 && s.mscale_all_dim > 0 ? mscale(s.mscale) / mscale(s.mscale_all_dim) : mscale(1.0);
  }
  if (s.rope_type == "longrope" && factor > 1)
    return std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(s.original_max_position_embeddings)));
  return 1.0;
}

// The tables of positions 0..T-1 for these frequencies, times `scale` in float32 (as transformers
// scales cos and sin).
std::pair<Tensor, Tensor> scaled_tables(int64_t T, const std::vector<float>& inv_freq, double scale) {
  auto [c, s] = rotary_cos_sin(T, inv_freq);
  if (scale == 1.0) return {c, s};
  return {mul(c, static_cast<double>(static_cast<float>(scale))), mul(s, static_cast<double>(static_cast<float>(scale)))};
}

}  // namespace

void RopeScaling::validate(int64_t head_dim) const {
  TG_CHECK(rope_type == "default" || rope_type == "linear" || rope_type == "dynamic" || rope_type == "llama3" ||
               rope_type == "yarn" || rope_type == "longrope",
           "RopeScaling", "rope_type \"", rope_type, "\" is not supported (default, linear, dynamic, llama3, yarn, longrope)");
  TG_CHECK(std::isfinite(factor) && (factor >= 1 || (factor == 0 && (rope_type == "yarn" || rope_type == "longrope"))),
           "RopeScaling", "factor must be a finite number >= 1, got ", factor);
  TG_CHECK(std::isfinite(partial_rotary_factor) && partial_rotary_factor > 0 && partial_rotary_factor <= 1,
           "RopeScaling", "partial_rotary_factor must be in (0, 1], got ", partial_rotary_factor);
  const int64_t dim = rotary_dim(head_dim);
  TG_CHECK(dim >= 2 && dim % 2 == 0, "RopeScaling", "the rotary dims, int(head_dim ", head_dim,
           " * partial_rotary_factor ", partial_rotary_factor, ") = ", dim, ", must be even and positive");
  if (rope_type == "llama3" || rope_type == "yarn" || rope_type == "longrope")
    TG_CHECK(original_max_position_embeddings > 0, "RopeScaling", "original_max_position_embeddings must be positive, got ",
             original_max_position_embeddings);
  TG_CHECK(std::isfinite(attention_factor) && attention_factor >= 0, "RopeScaling",
           "attention_factor must be a finite number >= 0 (0: derived), got ", attention_factor);
  if (rope_type == "llama3")
    TG_CHECK(std::isfinite(low_freq_factor) && std::isfinite(high_freq_factor) && low_freq_factor > 0 &&
                 high_freq_factor > low_freq_factor,
             "RopeScaling", "llama3 wants 0 < low_freq_factor < high_freq_factor, got ", low_freq_factor, " and ",
             high_freq_factor);
  if (rope_type == "yarn")
    TG_CHECK(std::isfinite(beta_fast) && std::isfinite(beta_slow) && beta_slow > 0 && beta_fast > 0 &&
                 std::isfinite(mscale) && std::isfinite(mscale_all_dim),
             "RopeScaling", "yarn wants positive beta_fast and beta_slow and finite mscales, got beta_fast ", beta_fast,
             ", beta_slow ", beta_slow);
  if (rope_type != "longrope") return;
  for (const auto* f : {&short_factor, &long_factor}) {
    const char* name = f == &short_factor ? "short_factor" : "long_factor";
    TG_CHECK(static_cast<int64_t>(f->size()) == dim / 2, "RopeScaling", "longrope's ", name, " has ", f->size(),
             " numbers, wants one per rotary frequency: ", dim / 2);
    for (double x : *f)
      TG_CHECK(std::isfinite(x) && x > 0, "RopeScaling", "longrope's ", name, " holds ", x, ", wants positive numbers");
  }
}

int64_t RopeScaling::rotary_dim(int64_t head_dim) const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

RotaryEmbedding::RotaryEmbedding(int64_t hd, int64_t max_pos, double th, const RopeScaling& s)
    : Module("RotaryEmbedding"), head_dim(hd), max_positions(max_pos), theta(th), scaling(s) {
  s.validate(hd);
  const int64_t dim = s.rotary_dim(hd);
  const double scale = attention_scaling(s, max_pos);
  if (s.rope_type == "longrope") {
    const int64_t short_rows = std::min(max_pos, s.original_max_position_embeddings);
    std::tie(cos, sin) = scaled_tables(short_rows, longrope_inv_freq(dim, th, s.short_factor), scale);
    std::tie(cos_long, sin_long) = scaled_tables(max_pos, longrope_inv_freq(dim, th, s.long_factor), scale);
    register_buffer("cos_long", cos_long, /*persistent=*/false);
    register_buffer("sin_long", sin_long, /*persistent=*/false);
  } else {
    std::vector<float> inv_freq = s.rope_type == "yarn" ? yarn_inv_freq(dim, th, context_factor(s, max_pos), s)
                                                        : rotary_inv_freq(dim, th);
    if (s.rope_type == "linear")
      for (float& f : inv_freq) f /= static_cast<float>(s.factor);
    if (s.rope_type == "llama3") llama3_scale(inv_freq, s);
    std::tie(cos, sin) = scaled_tables(max_pos, inv_freq, scale);
  }
  register_buffer("cos", cos, /*persistent=*/false);
  register_buffer("sin", sin, /*persistent=*/false);
}

namespace {

// longrope's choice, as transformers' dynamic_rope_update makes it per forward: the long tables
// once the forward's sequence (its last position + 1) passes the pre-training context.
std::pair<const Tensor*, const Tensor*> tables_for(const RotaryEmbedding& r, int64_t sequence) {
  if (r.cos_long.defined() && sequence > r.scaling.original_max_position_embeddings) return {&r.cos_long, &r.sin_long};
  return {&r.cos, &r.sin};
}

// The table rows of `positions` [B, T]: per sequence [B, 1, T, rotary_dim] in `dtype`.
std::pair<Tensor, Tensor> rows_of(const Tensor& cos, const Tensor& sin, const Tensor& positions, DType dtype) {
  return {unsqueeze(tg::to(embedding(cos, positions), dtype), 1), unsqueeze(tg::to(embedding(sin, positions), dtype), 1)};
}

}  // namespace

std::pair<Tensor, Tensor> RotaryEmbedding::cos_sin(int64_t T) const {
  TG_CHECK(T >= 1 && T <= max_positions, "RotaryEmbedding", "sequence length ", T, " is outside [1, ", max_positions,
           "] (raise max_position_embeddings)");
  auto [c, s] = tables_for(*this, T);
  return {slice(*c, 0, 0, T), slice(*s, 0, 0, T)};
}

std::pair<Tensor, Tensor> RotaryEmbedding::cos_sin(const CacheStep& step, DType dtype) const {
  TG_CHECK(step.max_position < max_positions, "RotaryEmbedding", "position ", step.max_position,
           " is past max_position_embeddings ", max_positions);
  auto [c, s] = tables_for(*this, step.max_position + 1);
  if (step.uniform)
    return {slice(*c, 0, step.start, step.start + step.tokens), slice(*s, 0, step.start, step.start + step.tokens)};
  return rows_of(*c, *s, step.positions, dtype);
}

std::pair<Tensor, Tensor> RotaryEmbedding::cos_sin(const Tensor& position_ids, DType dtype) const {
  // longrope: the row's length stands for the last position + 1 (transformers reads the largest
  // position id, a host sync): they differ only for packed rows longer than the pre-training
  // context whose documents all fit it.
  auto [c, s] = tables_for(*this, position_ids.dim() >= 1 ? position_ids.shape().back() : 1);
  return rows_of(*c, *s, position_ids, dtype);
}

std::string RotaryEmbedding::extra_repr() const {
  return "head_dim=" + std::to_string(head_dim) + ", max_positions=" + std::to_string(max_positions) +
         (scaling.rope_type == "default" ? "" : ", rope_type=" + scaling.rope_type);
}

}  // namespace tg::nn
