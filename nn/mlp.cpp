#include "nn/mlp.h"

#include <algorithm>

#include "core/activation_checkpoint.h"
#include "core/error.h"
#include "ops/binary.h"
#include "ops/shape.h"
#include "ops/silu_mul.h"
#include "ops/unary.h"

namespace tg::nn {

GatedMLP::GatedMLP(int64_t hidden, int64_t inter, const GatedMLPOptions& o, Generator& gen)
    : Module("GatedMLP"), intermediate(inter), options(o) {
  if (o.fused) {
    gate_up_proj = std::make_shared<Linear>(hidden, 2 * inter, o.bias, gen);
    register_module("gate_up_proj", gate_up_proj);
  } else {
    gate_proj = std::make_shared<Linear>(hidden, inter, o.bias, gen);
    up_proj = std::make_shared<Linear>(hidden, inter, o.bias, gen);
    place_weights_adjacent({gate_proj, up_proj});  // forward_group's one GEMM reads them in place
    register_module("gate_proj", gate_proj);
    register_module("up_proj", up_proj);
  }
  down_proj = std::make_shared<Linear>(inter, hidden, o.bias, gen);
  register_module("down_proj", down_proj);
}

namespace {

Tensor gated(const GatedMLP& mlp, const Tensor& x) {
  const std::vector<Tensor> gate_up = mlp.gate_up_proj ? split(mlp.gate_up_proj->forward(x), mlp.intermediate, -1)
                                                       : forward_group({mlp.gate_proj, mlp.up_proj}, x);  // one op for the two
  if (mlp.options.activation == GatedMLPOptions::Activation::SiLU)
    return mlp.down_proj->forward(silu_mul(gate_up[0], gate_up[1]));
  return mlp.down_proj->forward(mul(gelu(gate_up[0], "tanh"), gate_up[1]));
}

}  // namespace

Tensor GatedMLP::forward(const Tensor& x) {
  const int64_t hidden = x.shape().back(), tokens = x.numel() / std::max<int64_t>(hidden, 1);
  if (chunk_tokens <= 0 || tokens <= chunk_tokens) return gated(*this, x);
  std::vector<Tensor> outs;
  for (const Tensor& part : split(reshape(x, {tokens, hidden}), chunk_tokens, 0)) {
    auto fn = [this](const std::vector<Tensor>& in) { return std::vector<Tensor>{gated(*this, in[0])}; };
    outs.push_back(checkpoint(fn, {part})[0]);
  }
  Shape shape = x.shape();
  shape.back() = outs[0].shape().back();
  return reshape(cat(outs, 0), shape);
}

void tile_mlps(Module& model, int64_t chunk_tokens) {
  TG_CHECK(chunk_tokens >= 0, "tile_mlps", "chunk_tokens must be >= 0 (0: untiled), got ", chunk_tokens);
  int found = 0;
  for (const auto& [path, m] : model.named_modules())
    if (auto* mlp = dynamic_cast<GatedMLP*>(m)) {
      mlp->chunk_tokens = chunk_tokens;
      ++found;
    }
  TG_CHECK(found > 0, "tile_mlps", model.type_name(), " has no gated MLP to tile (the Llama-like families have)");
}

GELUMLP::GELUMLP(int64_t hidden, int64_t intermediate, bool bias, double p, Generator& gen) : Module("GELUMLP") {
  c_fc = std::make_shared<Linear>(hidden, intermediate, bias, gen);
  c_proj = std::make_shared<Linear>(intermediate, hidden, bias, gen);
  dropout = std::make_shared<Dropout>(p);
  register_module("c_fc", c_fc);
  register_module("c_proj", c_proj);
  register_module("dropout", dropout);
}

Tensor GELUMLP::forward(const Tensor& x) {
  return dropout->forward(c_proj->forward(gelu(c_fc->forward(x), "tanh")));
}

}  // namespace tg::nn
