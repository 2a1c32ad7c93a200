// Transformer feed-forward blocks.
#pragma once

#include <cstdint>
#include <memory>

#include "core/generator.h"
#include "nn/dropout.h"
#include "nn/linear.h"

namespace tg::nn {

// What the gated MLPs of the decoder families change.
struct GatedMLPOptions {
  enum class Activation { SiLU, GELUTanh };
  Activation activation = Activation::SiLU;  // SwiGLU (Llama, Qwen, Phi-3) or GeGLU with tanh GELU (Gemma)
  bool bias = false;        // on gate, up and down (Llama's mlp_bias)
  bool fused = false;       // Phi-3: one gate_up_proj, gate rows then up rows
};

// down_proj(act(gate_proj(x)) * up_proj(x)) (transformers' LlamaMLP, GemmaMLP, Phi3MLP).
// Tiled (chunk_tokens > 0, Unsloth's TiledMLP): over chunks of that many tokens, each recomputed at
// backward, so its [tokens, intermediate] activations exist for one chunk at a time (long
// sequences); the same values up to the GEMMs' rounding over other row counts.
class GatedMLP : public Module {
 public:
  GatedMLP(int64_t hidden, int64_t intermediate, const GatedMLPOptions& options = {},
           Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;

  int64_t intermediate;
  GatedMLPOptions options;
  int64_t chunk_tokens = 0;  // 0: the whole input at once
  std::shared_ptr<Linear> gate_proj, up_proj;  // unfused only
  std::shared_ptr<Linear> gate_up_proj;        // fused only
  std::shared_ptr<Linear> down_proj;
};

// Sets chunk_tokens of every GatedMLP in `model` (0: untiled); tg::Error when it has none or the
// size is negative.
void tile_mlps(Module& model, int64_t chunk_tokens);

// GPT-2's MLP: dropout(c_proj(gelu_tanh(c_fc(x)))).
class GELUMLP : public Module {
 public:
  GELUMLP(int64_t hidden, int64_t intermediate, bool bias = true, double dropout = 0.0,
          Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
};

}  // namespace tg::nn
