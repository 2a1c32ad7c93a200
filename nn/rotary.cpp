#include "nn/rotary.h"

#include "ops/rope.h"
#include "ops/shape.h"

namespace tg::nn {

RotaryEmbedding::RotaryEmbedding(int64_t hd, int64_t max_pos, double th)
    : Module("RotaryEmbedding"), head_dim(hd), max_positions(max_pos), theta(th) {
  std::tie(cos, sin) = rotary_cos_sin(max_pos, hd, th);
  register_buffer("cos", cos, /*persistent=*/false);
  register_buffer("sin", sin, /*persistent=*/false);
}

std::pair<Tensor, Tensor> RotaryEmbedding::cos_sin(int64_t T) const {
  TG_CHECK(T >= 1 && T <= max_positions, "RotaryEmbedding", "sequence length ", T, " is outside [1, ", max_positions,
           "] (raise max_position_embeddings)");
  return {slice(cos, 0, 0, T), slice(sin, 0, 0, T)};
}

std::string RotaryEmbedding::extra_repr() const {
  return "head_dim=" + std::to_string(head_dim) + ", max_positions=" + std::to_string(max_positions);
}

}  // namespace tg::nn
