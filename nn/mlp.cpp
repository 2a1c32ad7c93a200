#include "nn/mlp.h"

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

Tensor GatedMLP::forward(const Tensor& x) {
  const std::vector<Tensor> gate_up = gate_up_proj ? split(gate_up_proj->forward(x), intermediate, -1)
                                                   : forward_group({gate_proj, up_proj}, x);  // one op for the two
  if (options.activation == GatedMLPOptions::Activation::SiLU)
    return down_proj->forward(silu_mul(gate_up[0], gate_up[1]));
  return down_proj->forward(mul(gelu(gate_up[0], "tanh"), gate_up[1]));
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
