#include "nn/rotary.h"

#include <cmath>
#include <numbers>

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

}  // namespace

void RopeScaling::validate() const {
  TG_CHECK(rope_type == "default" || rope_type == "linear" || rope_type == "dynamic" || rope_type == "llama3",
           "RopeScaling", "rope_type \"", rope_type, "\" is not supported (default, linear, dynamic, llama3)");
  TG_CHECK(std::isfinite(factor) && factor >= 1, "RopeScaling", "factor must be a finite number >= 1, got ", factor);
  if (rope_type != "llama3") return;
  TG_CHECK(std::isfinite(low_freq_factor) && std::isfinite(high_freq_factor) && low_freq_factor > 0 &&
               high_freq_factor > low_freq_factor,
           "RopeScaling", "llama3 wants 0 < low_freq_factor < high_freq_factor, got ", low_freq_factor, " and ",
           high_freq_factor);
  TG_CHECK(original_max_position_embeddings > 0, "RopeScaling", "original_max_position_embeddings must be positive, got ",
           original_max_position_embeddings);
}

RotaryEmbedding::RotaryEmbedding(int64_t hd, int64_t max_pos, double th, const RopeScaling& s)
    : Module("RotaryEmbedding"), head_dim(hd), max_positions(max_pos), theta(th), scaling(s) {
  s.validate();
  std::vector<float> inv_freq = rotary_inv_freq(hd, th);
  if (s.rope_type == "linear")
    for (float& f : inv_freq) f /= static_cast<float>(s.factor);
  if (s.rope_type == "llama3") llama3_scale(inv_freq, s);
  std::tie(cos, sin) = rotary_cos_sin(max_pos, inv_freq);
  register_buffer("cos", cos, /*persistent=*/false);
  register_buffer("sin", sin, /*persistent=*/false);
}

std::pair<Tensor, Tensor> RotaryEmbedding::cos_sin(int64_t T) const {
  TG_CHECK(T >= 1 && T <= max_positions, "RotaryEmbedding", "sequence length ", T, " is outside [1, ", max_positions,
           "] (raise max_position_embeddings)");
  return {slice(cos, 0, 0, T), slice(sin, 0, 0, T)};
}

std::pair<Tensor, Tensor> RotaryEmbedding::cos_sin(const CacheStep& step, DType dtype) const {
  TG_CHECK(step.max_position < max_positions, "RotaryEmbedding", "position ", step.max_position,
           " is past max_position_embeddings ", max_positions);
  if (step.uniform)
    return {slice(cos, 0, step.start, step.start + step.tokens), slice(sin, 0, step.start, step.start + step.tokens)};
  return cos_sin(step.positions, dtype);
}

std::pair<Tensor, Tensor> RotaryEmbedding::cos_sin(const Tensor& position_ids, DType dtype) const {
  return {unsqueeze(tg::to(embedding(cos, position_ids), dtype), 1),
          unsqueeze(tg::to(embedding(sin, position_ids), dtype), 1)};
}

std::string RotaryEmbedding::extra_repr() const {
  return "head_dim=" + std::to_string(head_dim) + ", max_positions=" + std::to_string(max_positions) +
         (scaling.rope_type == "default" ? "" : ", rope_type=" + scaling.rope_type);
}

}  // namespace tg::nn
