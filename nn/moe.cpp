#include "nn/moe.h"

#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/init.h"
#include "nn/linear4bit.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/clamped_swiglu.h"
#include "ops/embedding.h"
#include "ops/grouped_mm.h"
#include "ops/moe_routing.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/silu_mul.h"
#include "ops/softmax.h"
#include "ops/unary.h"

namespace tg::nn {
namespace {

// `parameter`'s dense slot and its 4-bit one in `m`, const as `m` is (tg::Error for another name).
template <class Experts>
auto& dense_slot(Experts& m, const std::string& parameter) {
  TG_CHECK(parameter == "gate_up_proj" || parameter == "down_proj", m.type_name().c_str(), "has no expert weight '",
           parameter, "' (gate_up_proj, down_proj)");
  return parameter == "gate_up_proj" ? m.gate_up_proj : m.down_proj;
}
template <class Experts>
auto& four_bit_slot(Experts& m, const std::string& parameter) {
  dense_slot(m, parameter);  // the name checked
  return parameter == "gate_up_proj" ? m.gate_up_proj_4bit : m.down_proj_4bit;
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

Experts4bit::Experts4bit(std::vector<QuantState4bit> q) : Module("Experts4bit"), experts(std::move(q)) {
  TG_CHECK(!experts.empty(), "Experts4bit", "wants a 4-bit weight per expert, got none");
  for (size_t e = 0; e < experts.size(); ++e) {
    TG_CHECK(experts[e].shape.size() == 2 && experts[e].shape == experts[0].shape, "Experts4bit", "expert ", e,
             "'s weight is ", experts[e].shape, ", wants 2-D and expert 0's ", experts[0].shape);
    const std::string n = "_" + std::to_string(e);
    register_buffer("weight" + n, experts[e].packed, /*persistent=*/false, /*keeps_dtype=*/true);
    for (auto& [name, slot] : Linear4bit::state_buffers(experts[e]))
      register_buffer(name + n, *slot, /*persistent=*/false, /*keeps_dtype=*/true);
  }
}

std::shared_ptr<Experts4bit> Experts4bit::quantize(const Tensor& w, const std::string& quant_type, bool double_quant,
                                                   int64_t blocksize) {
  TG_CHECK(w.defined() && w.dim() == 3, "Experts4bit", "wants the experts' weights [E, out, in], got ",
           w.defined() ? shape_str(w.shape()) : std::string("undefined"));
  NoGradGuard g;
  std::vector<QuantState4bit> experts;
  for (int64_t e = 0; e < w.shape()[0]; ++e) {
    try {
      const Tensor one = reshape(contiguous(slice(w.detach(), 0, e, e + 1)), {w.shape()[1], w.shape()[2]});
      experts.push_back(tg::quantize_4bit(one, quant_type, double_quant, blocksize));
    } catch (const Error& err) {
      fail("Experts4bit", "expert ", e, ": ", err.what());
    }
  }
  return std::make_shared<Experts4bit>(std::move(experts));
}

Tensor Experts4bit::dequantized() const {
  NoGradGuard g;
  const QuantState4bit& first = experts[0];
  const int64_t E = static_cast<int64_t>(experts.size());
  Tensor out = Tensor::empty({E, first.shape[0], first.shape[1]}, {first.dtype, first.device()});
  for (int64_t e = 0; e < E; ++e) dequantize_4bit_(slice(out, 0, e, e + 1), experts[static_cast<size_t>(e)]);
  return out;
}

std::string Experts4bit::extra_repr() const {
  std::ostringstream os;
  const QuantState4bit& q = experts[0];
  os << "experts=" << experts.size() << ", shape=" << shape_str(q.shape) << ", quant_type=" << q.quant_type
     << (q.nested() ? ", double_quant" : "");
  return os.str();
}

MoeExperts::MoeExperts(int64_t h, const MoeOptions& o) : Module("MoeExperts"), options(o), hidden(h) {
  o.validate(h);
  const int64_t E = o.num_experts, I = o.intermediate_size;
  const TensorOptions p = init::parameter_options();
  // Deferred as nn::Linear's weights are: from_pretrained may quantise them as they stream in.
  auto weight = [&](const Shape& shape) {
    return init::deferring_linear_weights() ? init::unallocated(shape, p) : empty(shape, p);
  };
  if (o.experts == MoeOptions::Experts::SwiGLU) {
    gate_up_proj = weight({E, 2 * I, h});
    down_proj = weight({E, h, I});
  } else {
    gate_up_proj = weight({E, h, 2 * I});
    down_proj = weight({E, I, h});
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
      down_proj_bias(base.down_proj_bias),
      gate_up_proj_4bit(base.gate_up_proj_4bit),
      down_proj_4bit(base.down_proj_4bit) {
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
  register_module("gate_up_proj_4bit", gate_up_proj_4bit);
  register_module("down_proj_4bit", down_proj_4bit);
}


void MoeExperts::init(double std, Generator& gen) {
  init::normal_(gate_up_proj, 0.0, std, gen);
  init::normal_(down_proj, 0.0, std, gen);
  if (gate_up_proj_bias.defined()) init::zeros_(gate_up_proj_bias);
  if (down_proj_bias.defined()) init::zeros_(down_proj_bias);
}

std::optional<MoeExperts::Update> MoeExperts::update(const std::string&) const { return std::nullopt; }

Tensor MoeExperts::weight(const std::string& parameter) const {
  if (const auto& q = four_bit_slot(*this, parameter)) return q->dequantized();
  const Tensor& w = dense_slot(*this, parameter);
  return options.experts == MoeOptions::Experts::SwiGLU ? w : transpose(w, 1, 2);
}

Shape MoeExperts::weight_shape(const std::string& parameter) const {
  const auto& q = four_bit_slot(*this, parameter);
  if (!q) return weight(parameter).shape();
  return {static_cast<int64_t>(q->experts.size()), q->experts[0].shape[0], q->experts[0].shape[1]};
}

DType MoeExperts::weight_dtype() const {
  return gate_up_proj.defined() ? gate_up_proj.dtype() : gate_up_proj_4bit->experts[0].dtype;
}

Device MoeExperts::weight_device() const {
  return gate_up_proj.defined() ? gate_up_proj.device() : gate_up_proj_4bit->experts[0].device();
}

void MoeExperts::quantize_4bit(const std::string& parameter, const std::string& quant_type, bool double_quant,
                               int64_t blocksize) {
  TG_CHECK(dense_slot(*this, parameter).defined(), type_name().c_str(), "'", parameter, "' is in 4 bits already");
  std::shared_ptr<Experts4bit> q;
  try {
    q = Experts4bit::quantize(weight(parameter), quant_type, double_quant, blocksize);
  } catch (const Error& err) {
    fail(type_name().c_str(), "'", parameter, "': ", err.what());
  }
  install_4bit(parameter, std::move(q));
}

void MoeExperts::install_4bit(const std::string& parameter, std::shared_ptr<Experts4bit> q) {
  Tensor& slot = dense_slot(*this, parameter);
  TG_CHECK(slot.defined(), type_name().c_str(), "'", parameter, "' is in 4 bits already");
  const Shape want = weight_shape(parameter);
  TG_CHECK(q && static_cast<int64_t>(q->experts.size()) == want[0] && q->experts[0].shape == Shape({want[1], want[2]}),
           type_name().c_str(), "4-bit experts for '", parameter, "' want ", want[0], " of ", Shape({want[1], want[2]}));
  q->train(is_training());
  four_bit_slot(*this, parameter) = std::move(q);
  slot = Tensor();
}

void MoeExperts::dequantize() {
  NoGradGuard g;
  for (const char* parameter : {"gate_up_proj", "down_proj"}) {
    std::shared_ptr<Experts4bit>& q = four_bit_slot(*this, parameter);
    if (!q) continue;
    const Tensor w = q->dequantized();  // [E, out, in]
    dense_slot(*this, parameter) = options.experts == MoeOptions::Experts::SwiGLU ? w : contiguous(transpose(w, 1, 2));
    q = nullptr;
  }
}

Tensor MoeExperts::forward(const Tensor& x, const std::vector<int64_t>& counts) {
  auto project = [&](const Tensor& in, const char* parameter, const Tensor& bias) {
    const std::optional<Update> u = update(parameter);
    // float32 adapters of a bfloat16 layer (peft's autocast_adapter_dtype) computed in its dtype
    const Tensor A = u ? tg::to(u->lora_A, in.dtype()) : Tensor(), B = u ? tg::to(u->lora_B, in.dtype()) : Tensor();
    const double scaling = u ? u->scaling : 1.0;
    if (const auto& q = four_bit_slot(*this, parameter)) return grouped_mm_4bit(in, q->experts, counts, bias, A, B, scaling);
    return grouped_mm(in, weight(parameter), counts, bias, A, B, scaling);
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
