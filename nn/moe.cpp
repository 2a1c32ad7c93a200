#include "nn/moe.h"

#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/init.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/embedding.h"
#include "ops/grouped_mm.h"
#include "ops/masked_fill.h"
#include "ops/moe_routing.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/silu_mul.h"
#include "ops/softmax.h"
#include "ops/unary.h"

namespace tg::nn {
namespace {

// true where t > v (no gradient): the elements a clamp at v replaces.
Tensor above(const Tensor& t, double v) {
  NoGradGuard g;
  return to(relu(sub(t.detach(), v)), kBool);
}

// gpt-oss's activation of its interleaved [n, 2I] gate / up columns -> [n, I].
Tensor clamped_swiglu(const Tensor& gate_up, double alpha, double limit) {
  const int64_t width = gate_up.shape()[1];
  Tensor gate = slice(gate_up, 1, 0, width, 2), up = slice(gate_up, 1, 1, width, 2);
  gate = masked_fill(gate, above(gate, limit), limit);
  up = masked_fill(up, above(up, limit), limit);
  up = masked_fill(up, above(neg(up.detach()), limit), -limit);
  return mul(add(up, 1.0), mul(gate, sigmoid(mul(gate, alpha))));
}

}  // namespace

void MoeOptions::validate(int64_t hidden) const {
  const char* who = "MoeOptions";
  TG_CHECK(num_experts >= 1, who, "num_experts must be positive, got ", num_experts);
  TG_CHECK(top_k >= 1 && top_k <= num_experts, who, "top_k (num_experts_per_tok) is ", top_k, ", wants 1 to ",
           num_experts, " (num_experts)");
  TG_CHECK(intermediate_size >= 1, who, "the experts' intermediate_size must be positive, got ", intermediate_size);
  TG_CHECK(hidden >= 1, who, "hidden_size must be positive, got ", hidden);
  TG_CHECK(router == "gate" || router == "router", who, "router is named \"gate\" or \"router\", got \"", router, "\"");
  TG_CHECK(swiglu_limit > 0 && swiglu_alpha > 0, who, "swiglu_limit and swiglu_alpha must be positive, got ",
           swiglu_limit, " and ", swiglu_alpha);
}

MoeExperts::MoeExperts(int64_t h, const MoeOptions& o) : Module("MoeExperts"), options(o), hidden(h) {
  o.validate(h);
  const int64_t E = o.num_experts, I = o.intermediate_size;
  const TensorOptions p = init::parameter_options();
  if (o.experts == MoeOptions::Experts::SwiGLU) {
    gate_up_proj = empty({E, 2 * I, h}, p);
    down_proj = empty({E, h, I}, p);
  } else {
    gate_up_proj = empty({E, h, 2 * I}, p);
    down_proj = empty({E, I, h}, p);
    gate_up_proj_bias = empty({E, 2 * I}, p);
    down_proj_bias = empty({E, h}, p);
  }
  register_tensors(true);
}

MoeExperts::MoeExperts(const std::string& type_name, const MoeExperts& base)
    : Module(type_name),
      options(base.options),
      hidden(base.hidden),
      gate_up_proj(base.gate_up_proj),
      down_proj(base.down_proj),
      gate_up_proj_bias(base.gate_up_proj_bias),
      down_proj_bias(base.down_proj_bias) {
  register_tensors(false);
  train(base.is_training());
}

void MoeExperts::register_tensors(bool fresh) {
  auto trains = [fresh](const Tensor& t) { return fresh || (t.defined() && t.requires_grad()); };
  // transformers' order (peft nests its wrappers of one module's parameters in it)
  register_parameter("gate_up_proj", gate_up_proj, trains(gate_up_proj));
  register_parameter("gate_up_proj_bias", gate_up_proj_bias, trains(gate_up_proj_bias));
  register_parameter("down_proj", down_proj, trains(down_proj));
  register_parameter("down_proj_bias", down_proj_bias, trains(down_proj_bias));
}

void MoeExperts::init(double std, Generator& gen) {
  init::normal_(gate_up_proj, 0.0, std, gen);
  init::normal_(down_proj, 0.0, std, gen);
  if (gate_up_proj_bias.defined()) init::zeros_(gate_up_proj_bias);
  if (down_proj_bias.defined()) init::zeros_(down_proj_bias);
}

std::optional<MoeExperts::Update> MoeExperts::update(const std::string&) const { return std::nullopt; }

Tensor MoeExperts::weight(const std::string& parameter) const {
  TG_CHECK(parameter == "gate_up_proj" || parameter == "down_proj", type_name().c_str(), "has no expert weight '",
           parameter, "' (gate_up_proj, down_proj)");
  const Tensor& w = parameter == "gate_up_proj" ? gate_up_proj : down_proj;
  return options.experts == MoeOptions::Experts::SwiGLU ? w : transpose(w, 1, 2);
}

Tensor MoeExperts::forward(const Tensor& x, const std::vector<int64_t>& counts) {
  auto project = [&](const Tensor& in, const char* parameter, const Tensor& bias) {
    const std::optional<Update> u = update(parameter);
    if (!u) return grouped_mm(in, weight(parameter), counts, bias);
    // float32 adapters of a bfloat16 layer (peft's autocast_adapter_dtype) computed in its dtype
    return grouped_mm(in, weight(parameter), counts, bias, tg::to(u->lora_A, in.dtype()), tg::to(u->lora_B, in.dtype()),
                      u->scaling);
  };
  const Tensor gate_up = project(x, "gate_up_proj", gate_up_proj_bias);
  const int64_t I = options.intermediate_size;
  const Tensor act = options.experts == MoeOptions::Experts::SwiGLU
                         ? silu_mul(slice(gate_up, 1, 0, I), slice(gate_up, 1, I, 2 * I))
                         : clamped_swiglu(gate_up, options.swiglu_alpha, options.swiglu_limit);
  return project(act, "down_proj", down_proj_bias);
}

std::string MoeExperts::extra_repr() const {
  std::ostringstream os;
  os << "num_experts=" << options.num_experts << ", hidden=" << hidden << ", intermediate=" << options.intermediate_size
     << (options.experts == MoeOptions::Experts::SwiGLU ? "" : ", clamped_swiglu");
  return os.str();
}

SparseMoeBlock::SparseMoeBlock(int64_t hidden, const MoeOptions& o, Generator& gen)
    : Module("SparseMoeBlock"), options(o) {
  o.validate(hidden);
  router = std::make_shared<Linear>(hidden, o.num_experts, o.router_bias(), gen);
  experts = std::make_shared<MoeExperts>(hidden, o);
  register_module(o.router, router);
  register_module("experts", experts);
}

Tensor SparseMoeBlock::forward(const Tensor& x) {
  const int64_t H = experts->hidden, E = options.num_experts, k = options.top_k;
  TG_CHECK(x.defined() && x.dim() >= 1 && x.shape().back() == H, "SparseMoeBlock", "x must be [..., ", H, "], got ",
           x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  const Tensor x2 = reshape(x, {-1, H});
  const Tensor logits = router->forward(x2);  // [T, E]
  // softmax in float32 for bfloat16 logits (transformers' dtype=torch.float); float64 stays
  const Tensor wide = logits.dtype() == kBFloat16 ? tg::to(logits, kFloat32) : logits;
  Tensor probs, weights, chosen;
  if (options.routing == MoeOptions::Routing::SoftmaxTopK) {
    probs = softmax(wide, -1);
    std::tie(weights, chosen) = topk(probs, k);
    if (options.norm_topk_prob) weights = div(weights, sum(weights, {-1}, true));
  } else {
    Tensor top;
    std::tie(top, chosen) = topk(logits, k);
    weights = softmax(top, -1);
  }
  const ExpertOrder order = sort_by_expert(chosen, E);
  const std::vector<int64_t> counts =
      order.counts.to_vector<int64_t>();  // the layer's one host read (grouped_mm's sizes)
  const Tensor rows = experts->forward(embedding(x2, order.token_of_row), counts);      // [T * k, H], grouped by expert
  const Tensor per_choice = reshape(embedding(rows, order.row_of_choice), {-1, k, H});  // [T, k, H]
  const Tensor out = sum(mul(per_choice, unsqueeze(tg::to(weights, x.dtype()), -1)), {1});
  if (keep_router_stats) {
    if (!probs.defined()) probs = softmax(wide, -1);
    stats = {sum(probs, {0}), counts, x2.shape()[0]};
  }
  return reshape(out, x.shape());
}

Tensor load_balancing_loss(const std::vector<const RouterStats*>& layers, int64_t num_experts) {
  TG_CHECK(!layers.empty(), "load_balancing_loss", "no sparse layer kept its router stats (keep_router_stats)");
  std::vector<double> choices(static_cast<size_t>(num_experts), 0.0);
  Tensor probability;
  int64_t tokens = 0;
  for (const RouterStats* s : layers) {
    TG_CHECK(s && s->probability_sum.defined() && static_cast<int64_t>(s->counts.size()) == num_experts,
             "load_balancing_loss", "a sparse layer has no router stats of its last forward (keep_router_stats)");
    for (int64_t e = 0; e < num_experts; ++e) choices[e] += static_cast<double>(s->counts[e]);
    probability = probability.defined() ? add(probability, s->probability_sum) : s->probability_sum;
    tokens += s->tokens;
  }
  const double n = static_cast<double>(std::max<int64_t>(tokens, 1));
  for (double& c : choices) c /= n;
  const Tensor fraction = to(from_vector(choices, {num_experts}, probability.device()), probability.dtype());
  return mul(sum(mul(probability, fraction)), static_cast<double>(num_experts) / n);
}

}  // namespace tg::nn
