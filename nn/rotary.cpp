#include "nn/rotary.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "core/limits.h"
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

// The frequencies of a table (longrope: of `factors`, its short or long ones).
std::vector<float> inv_freq_of(int64_t dim, double theta, const RopeScaling& s, int64_t max_positions,
                               const std::vector<double>& factors = {}) {
  if (s.rope_type == "longrope") return longrope_inv_freq(dim, theta, factors);
  std::vector<float> inv_freq = s.rope_type == "yarn" ? yarn_inv_freq(dim, theta, context_factor(s, max_positions), s)
                                                      : rotary_inv_freq(dim, theta);
  if (s.rope_type == "linear")
    for (float& f : inv_freq) f /= static_cast<float>(s.factor);
  if (s.rope_type == "llama3") llama3_scale(inv_freq, s);
  return inv_freq;
}

// The tables of positions 0..T-1 for these frequencies, times `scale` in float32 (as transformers
// scales cos and sin).
std::pair<Tensor, Tensor> scaled_tables(int64_t T, const std::vector<float>& inv_freq, double scale) {
  auto [c, s] = rotary_cos_sin(T, inv_freq);
  if (scale == 1.0) return {c, s};
  return {mul(c, static_cast<double>(static_cast<float>(scale))), mul(s, static_cast<double>(static_cast<float>(scale)))};
}

// The fields of `s` that its type reads, for messages ("rope_type yarn, factor 4, ...").
std::string fields_of(const RopeScaling& s) {
  std::ostringstream o;
  o << "rope_type " << s.rope_type;
  if (s.rope_type == "default") return o.str();
  o << ", factor " << s.factor;
  if (s.rope_type == "linear" || s.rope_type == "dynamic") return o.str();
  o << ", original_max_position_embeddings " << s.original_max_position_embeddings;
  if (s.rope_type == "llama3") {
    o << ", low_freq_factor " << s.low_freq_factor << ", high_freq_factor " << s.high_freq_factor;
    return o.str();
  }
  o << ", attention_factor " << s.attention_factor;
  if (s.rope_type == "yarn")
    o << ", beta_fast " << s.beta_fast << ", beta_slow " << s.beta_slow << ", mscale " << s.mscale << ", mscale_all_dim "
      << s.mscale_all_dim;
  return o.str();
}

}  // namespace

void RopeScaling::validate(int64_t head_dim, int64_t max_positions, double theta, const char* theta_field) const {
  const char* op = "RopeScaling";
  TG_CHECK(rope_type == "default" || rope_type == "linear" || rope_type == "dynamic" || rope_type == "llama3" ||
               rope_type == "yarn" || rope_type == "longrope",
           op, "rope_type \"", rope_type, "\" is not supported (default, linear, dynamic, llama3, yarn, longrope)");
  TG_CHECK(max_positions >= 1 && max_positions <= kMaxContext, op, "max_position_embeddings ", max_positions,
           " is outside [1, ", kMaxContext, "] (the tables hold every position)");
  // The frequencies are theta^(-2i/dim); yarn divides by log(theta).
  TG_CHECK(std::isfinite(theta) && theta > 1, op, theta_field, " must be a finite number above 1, got ", theta);
  TG_CHECK(std::isfinite(factor) && (factor >= 1 || (factor == 0 && (rope_type == "yarn" || rope_type == "longrope"))),
           op, "factor must be a finite number >= 1, got ", factor);
  TG_CHECK(std::isfinite(partial_rotary_factor) && partial_rotary_factor > 0 && partial_rotary_factor <= 1, op,
           "partial_rotary_factor must be in (0, 1], got ", partial_rotary_factor);
  const int64_t dim = rotary_dim(head_dim);
  TG_CHECK(dim >= 2 && dim % 2 == 0, op, "the rotary dims, int(head_dim ", head_dim, " * partial_rotary_factor ",
           partial_rotary_factor, ") = ", dim, ", must be even and positive");
  // transformers raises dynamic's base to dim / (dim - 2) (at max_position_embeddings and past it).
  TG_CHECK(rope_type != "dynamic" || dim > 2, op, "dynamic scales ", theta_field, " by a power dim / (dim - 2): the ",
           "rotary dims, int(head_dim ", head_dim, " * partial_rotary_factor ", partial_rotary_factor, ") = ", dim,
           ", must be above 2");
  if (rope_type == "llama3" || rope_type == "yarn" || rope_type == "longrope")
    TG_CHECK(original_max_position_embeddings > 0, op, "original_max_position_embeddings must be positive, got ",
             original_max_position_embeddings);
  TG_CHECK(std::isfinite(attention_factor) && attention_factor >= 0, op,
           "attention_factor must be a finite number >= 0 (0: derived), got ", attention_factor);
  if (rope_type == "llama3")  // the ramp divides by high_freq_factor - low_freq_factor, in float32
    TG_CHECK(std::isfinite(low_freq_factor) && std::isfinite(high_freq_factor) && low_freq_factor > 0 &&
                 static_cast<float>(high_freq_factor) > static_cast<float>(low_freq_factor),
             op, "llama3 wants 0 < low_freq_factor < high_freq_factor (apart as float32 numbers), got low_freq_factor ",
             low_freq_factor, " and high_freq_factor ", high_freq_factor);
  if (rope_type == "yarn") {
    // log(original_max_position_embeddings / (2 pi beta)) bounds the ramp, from beta_slow up to beta_fast rotations.
    TG_CHECK(std::isfinite(beta_fast) && std::isfinite(beta_slow) && beta_slow > 0 && beta_fast > beta_slow, op,
             "yarn wants 0 < beta_slow < beta_fast (its ramp runs from beta_slow to beta_fast rotations), got beta_fast ",
             beta_fast, " and beta_slow ", beta_slow);
    TG_CHECK(std::isfinite(mscale) && std::isfinite(mscale_all_dim) && mscale >= 0 && mscale_all_dim >= 0, op,
             "yarn wants finite mscale and mscale_all_dim >= 0, got ", mscale, " and ", mscale_all_dim);
  }
  if ((rope_type == "yarn" || rope_type == "longrope") && factor == 0)
    TG_CHECK(context_factor(*this, max_positions) >= 1, op, rope_type,
             " without a factor scales by max_position_embeddings / original_max_position_embeddings = ", max_positions,
             " / ", original_max_position_embeddings, ", which must be >= 1 (the pre-training context is the shorter)");
  if (rope_type == "longrope") {
    for (const auto* f : {&short_factor, &long_factor}) {
      const char* name = f == &short_factor ? "short_factor" : "long_factor";
      TG_CHECK(static_cast<int64_t>(f->size()) == dim / 2, op, "longrope's ", name, " has ", f->size(),
               " numbers, wants one per rotary frequency: ", dim / 2, " (int(head_dim ", head_dim,
               " * partial_rotary_factor ", partial_rotary_factor, ") / 2)");
      for (double x : *f)  // each divides the frequency in float32
        TG_CHECK(std::isfinite(x) && x >= FLT_MIN && x <= FLT_MAX, op, "longrope's ", name, " holds ", x,
                 ", wants positive numbers a float32 holds, in [", FLT_MIN, ", ", FLT_MAX, "]");
    }
    if (attention_factor == 0 && context_factor(*this, max_positions) > 1)  // derived over log(original context)
      TG_CHECK(original_max_position_embeddings >= 2, op, "longrope derives its attention factor over ",
               "log(original_max_position_embeddings): it must be at least 2, got ", original_max_position_embeddings);
  }
  // What the divisions and logs leave: every frequency, angle and the cos / sin scale finite in float32.
  const auto scale = static_cast<float>(attention_scaling(*this, max_positions));
  TG_CHECK(std::isfinite(scale) && scale > 0, op, fields_of(*this), ": cos and sin scale by ", scale,
           " in float32 (attention_factor ", attention_factor, ", 0: derived), wants a positive finite number");
  std::vector<std::vector<float>> tables = {inv_freq_of(dim, theta, *this, max_positions, short_factor)};
  if (rope_type == "longrope") tables.push_back(inv_freq_of(dim, theta, *this, max_positions, long_factor));
  for (const std::vector<float>& freqs : tables) {
    for (size_t i = 0; i < freqs.size(); ++i)
      TG_CHECK(std::isfinite(freqs[i]) && freqs[i] >= 0 && std::isfinite(static_cast<float>(max_positions) * freqs[i]),
               op, fields_of(*this), " with ", theta_field, " ", theta, " and ", max_positions,
               " positions makes frequency ", i, " ", freqs[i], ": its angles would not be finite float32 numbers");
  }
}

int64_t RopeScaling::rotary_dim(int64_t head_dim) const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

RotaryEmbedding::RotaryEmbedding(int64_t hd, int64_t max_pos, double th, const RopeScaling& s)
    : Module("RotaryEmbedding"), head_dim(hd), max_positions(max_pos), theta(th), scaling(s) {
  s.validate(hd, max_pos, th);
  const int64_t dim = s.rotary_dim(hd);
  const bool longrope = s.rope_type == "longrope";
  const int64_t short_rows = longrope ? std::min(max_pos, s.original_max_position_embeddings) : 0;
  check_host_memory(static_cast<double>(max_pos + short_rows) * static_cast<double>(dim) * 2 * sizeof(float),
                    "RotaryEmbedding", "the cos and sin tables of " + std::to_string(max_pos) + " positions x " +
                                           std::to_string(dim) + " rotary dims (max_position_embeddings x head_dim)");
  const double scale = attention_scaling(s, max_pos);
  if (longrope) {
    std::tie(cos, sin) = scaled_tables(short_rows, inv_freq_of(dim, th, s, max_pos, s.short_factor), scale);
    std::tie(cos_long, sin_long) = scaled_tables(max_pos, inv_freq_of(dim, th, s, max_pos, s.long_factor), scale);
    register_buffer("cos_long", cos_long, /*persistent=*/false);
    register_buffer("sin_long", sin_long, /*persistent=*/false);
  } else {
    std::tie(cos, sin) = scaled_tables(max_pos, inv_freq_of(dim, th, s, max_pos), scale);
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
