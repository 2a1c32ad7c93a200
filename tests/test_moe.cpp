// The mixture-of-experts families (Qwen3-MoE, Mixtral, gpt-oss): the sparse block and the
// load-balancing loss against float64 loops written from transformers' modeling files, gradients
// through routing, sinks and experts, cached decoding, checkpointing, configs, the hub's
// per-expert and MXFP4 layouts, and LoRA on the experts as peft's target_parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/generation/kv_cache.h"
#include "nn/models/detail/mxfp4.h"
#include "nn/models/moe_lm.h"
#include "nn/models/pretrained.h"
#include "nn/moe.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_moe_models.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

using V = std::vector<double>;
using Experts = nn::MoeOptions::Experts;
using Routing = nn::MoeOptions::Routing;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The k largest of v by value (equal: lower index first), as torch.topk.
std::vector<int64_t> top(const V& v, int64_t k) {
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  order.resize(static_cast<size_t>(k));
  return order;
}

V softmax_of(const V& v) {
  const double mx = *std::max_element(v.begin(), v.end());
  V p(v.size());
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += p[i] = std::exp(v[i] - mx);
  for (double& x : p) x /= s;
  return p;
}

// One expert of the block on one token, from the modeling files: Qwen3-MoE's / Mixtral's
// down(silu(gate) * up) over [E, 2I, H] / [E, H, I]; gpt-oss's clamped SwiGLU over its interleaved
// [E, H, 2I] / [E, I, H] with biases.
V reference_expert(const nn::MoeExperts& ex, int64_t e, const V& x) {
  const int64_t H = ex.hidden, I = ex.options.intermediate_size;
  const V gu = ex.gate_up_proj.to_vector<double>(), dn = ex.down_proj.to_vector<double>();
  V act(static_cast<size_t>(I)), y(static_cast<size_t>(H), 0.0);
  if (ex.options.experts == Experts::SwiGLU) {
    for (int64_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int64_t h = 0; h < H; ++h) {
        g += gu[(e * 2 * I + i) * H + h] * x[h];
        u += gu[(e * 2 * I + I + i) * H + h] * x[h];
      }
      act[i] = g * sigmoid(g) * u;
    }
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < I; ++i) y[h] += dn[(e * H + h) * I + i] * act[i];
    return y;
  }
  const V gb = ex.gate_up_proj_bias.to_vector<double>(), db = ex.down_proj_bias.to_vector<double>();
  const double limit = ex.options.swiglu_limit, alpha = ex.options.swiglu_alpha;
  for (int64_t i = 0; i < I; ++i) {
    double g = gb[e * 2 * I + 2 * i], u = gb[e * 2 * I + 2 * i + 1];
    for (int64_t h = 0; h < H; ++h) {
      g += gu[(e * H + h) * 2 * I + 2 * i] * x[h];
      u += gu[(e * H + h) * 2 * I + 2 * i + 1] * x[h];
    }
    g = std::min(g, limit);
    u = std::clamp(u, -limit, limit);
    act[i] = (u + 1) * g * sigmoid(g * alpha);
  }
  for (int64_t h = 0; h < H; ++h) {
    y[h] = db[e * H + h];
    for (int64_t i = 0; i < I; ++i) y[h] += dn[(e * I + i) * H + h] * act[i];
  }
  return y;
}

// The block on x [T, H] token by token; the routing of each family as its router computes it.
// Also the per-token softmax over every expert and the experts chosen (the aux loss's inputs).
struct ReferenceBlock {
  V out, probs;
  std::vector<int64_t> chosen;
};
ReferenceBlock reference_block(nn::SparseMoeBlock& b, const V& x, int64_t T) {
  const nn::MoeOptions& o = b.options;
  const int64_t H = b.experts->hidden, E = o.num_experts, k = o.top_k;
  const V w = b.router->weight.to_vector<double>();
  const V bias = b.router->bias.defined() ? b.router->bias.to_vector<double>() : V(E, 0.0);
  ReferenceBlock r{V(static_cast<size_t>(T * H), 0.0), {}, {}};
  for (int64_t t = 0; t < T; ++t) {
    const V xt(x.begin() + t * H, x.begin() + (t + 1) * H);
    V logits(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      logits[e] = bias[e];
      for (int64_t h = 0; h < H; ++h) logits[e] += w[e * H + h] * xt[h];
    }
    const V p = softmax_of(logits);
    r.probs.insert(r.probs.end(), p.begin(), p.end());
    std::vector<int64_t> sel;
    V weights;
    if (o.routing == Routing::SoftmaxTopK) {  // softmax, top-k, renormalised
      sel = top(p, k);
      for (int64_t e : sel) weights.push_back(p[e]);
      if (o.norm_topk_prob) {
        const double s = std::accumulate(weights.begin(), weights.end(), 0.0);
        for (double& v : weights) v /= s;
      }
    } else {  // gpt-oss: top-k of the logits, softmax over them
      sel = top(logits, k);
      V picked;
      for (int64_t e : sel) picked.push_back(logits[e]);
      weights = softmax_of(picked);
    }
    for (int64_t j = 0; j < k; ++j) {
      r.chosen.push_back(sel[j]);
      const V y = reference_expert(*b.experts, sel[j], xt);
      for (int64_t h = 0; h < H; ++h) r.out[t * H + h] += weights[j] * y[h];
    }
  }
  return r;
}

// transformers' load_balancing_loss_func on the concatenated layers: E * sum_e f_e * P_e.
double reference_aux(const std::vector<ReferenceBlock>& layers, int64_t E) {
  V f(static_cast<size_t>(E), 0.0), P(static_cast<size_t>(E), 0.0);
  double n = 0;
  for (const ReferenceBlock& l : layers) {
    const size_t T = l.probs.size() / E;
    n += static_cast<double>(T);
    for (int64_t e : l.chosen) f[e] += 1;
    for (size_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) P[e] += l.probs[t * E + e];
  }
  double aux = 0;
  for (int64_t e = 0; e < E; ++e) aux += (f[e] / n) * (P[e] / n);
  return aux * E;
}

nn::MoeOptions block_options(Experts experts) {
  nn::MoeOptions o{.num_experts = 5, .top_k = 2, .intermediate_size = 6};
  if (experts == Experts::ClampedSwiGLU) {
    o.routing = Routing::TopKSoftmax;
    o.experts = experts;
    o.router = "router";
    o.swiglu_limit = 0.4;  // small enough that clamps act on these weights
  }
  return o;
}

// A block in float64 with weights large enough for the clamps and routing to matter.
std::shared_ptr<nn::SparseMoeBlock> float64_block(const nn::MoeOptions& o, uint64_t seed) {
  Generator gen(seed);
  auto b = std::make_shared<nn::SparseMoeBlock>(8, o, gen);
  b->to(kFloat64);
  NoGradGuard g;
  for (auto& [name, p] : b->named_parameters()) copy_(p, mul(randn(p.shape(), gen, {kFloat64}), 0.5));
  return b;
}

TEST(MoeBlock, MatchesTheModelingFilesLoops) {
  for (const Experts experts : {Experts::SwiGLU, Experts::ClampedSwiGLU})
    for (const bool norm : {true, false}) {
      nn::MoeOptions o = block_options(experts);
      o.norm_topk_prob = norm;
      SCOPED_TRACE(std::string(experts == Experts::SwiGLU ? "SwiGLU" : "clamped") + (norm ? " normed" : ""));
      // two layers: the aux loss takes their tokens as one batch
      auto block = float64_block(o, 11), second = float64_block(o, 13);
      Generator gen(12);
      const Tensor x = randn({2, 7, 8}, gen, {kFloat64}), x2 = randn({3, 8}, gen, {kFloat64});
      block->keep_router_stats = second->keep_router_stats = true;
      const Tensor y = block->forward(x), y2 = second->forward(x2);
      const ReferenceBlock want = reference_block(*block, x.to_vector<double>(), 14);
      const ReferenceBlock want2 = reference_block(*second, x2.to_vector<double>(), 3);
      EXPECT_TENSOR_NEAR(y, from_vector(want.out, {2, 7, 8}), 1e-12, 1e-12);
      EXPECT_TENSOR_NEAR(y2, from_vector(want2.out, {3, 8}), 1e-12, 1e-12);
      EXPECT_NEAR(nn::load_balancing_loss({&block->stats, &second->stats}, o.num_experts).item(),
                  reference_aux({want, want2}, 5), 1e-12);
    }
}

// Gradients through the routing (top-k weights, softmax, the gathers), the clamps and the experts.
TEST(MoeBlock, GradientsMatchFiniteDifferences) {
  for (const Experts experts : {Experts::SwiGLU, Experts::ClampedSwiGLU}) {
    auto block = float64_block(block_options(experts), 21);
    Generator gen(22);
    const Tensor x = randn({6, 8}, gen, {kFloat64, Device::cpu(), true});
    std::vector<Tensor> wrt = {x};
    for (auto& [name, p] : block->named_parameters()) wrt.push_back(p);
    block->keep_router_stats = true;
    EXPECT_GRADCHECK(
        [&] {
          const Tensor y = block->forward(x);
          return add(sum(mul(y, y)), nn::load_balancing_loss({&block->stats}, 5));
        },
        wrt, {.atol = 1e-7, .rtol = 1e-5});
  }
}

// The aux loss over several layers is one batch of their tokens (not a mean of per-layer losses),
// and loss() adds router_aux_loss_coef times it when output_router_logits.
TEST(MoeModels, LossAddsTheLoadBalancingLossOverEveryLayer) {
  for (const std::string& arch : kMoeArchitectures) {
    SCOPED_TRACE(arch);
    nn::MoeConfig c = tiny_moe(arch);
    c.output_router_logits = true;
    c.router_aux_loss_coef = 0.25;
    Generator gen(5);
    nn::MoeForCausalLM model(c, gen);
    model.to(kFloat64);
    const Tensor ids = randint(0, c.base.vocab_size, {2, 9}, gen);
    const Tensor loss = model.loss(ids, ids);
    const double aux = model.load_balancing_loss().item();
    model.model->spec.moe->output_router_logits = false;
    EXPECT_NEAR(loss.item(), model.loss(ids, ids).item() + 0.25 * aux, 1e-12);
    EXPECT_GT(aux, 0.0);
  }
}

// Gradient checkpointing recomputes each layer: the loss with its aux term and every gradient are
// bitwise as without.
TEST(MoeModels, CheckpointedLayersGiveTheSameLossAndGradients) {
  for (const std::string& arch : kMoeArchitectures) {
    SCOPED_TRACE(arch);
    nn::MoeConfig c = tiny_moe(arch);
    c.output_router_logits = true;
    auto run = [&](bool checkpointing) {
      Generator gen(8);
      nn::MoeForCausalLM model(c, gen);
      model.train();
      if (checkpointing) model.gradient_checkpointing_enable();
      const Tensor ids = randint(0, c.base.vocab_size, {2, 9}, gen);
      Tensor loss = model.loss(ids, ids);
      loss.backward();
      std::vector<Tensor> out = {loss.detach()};
      for (auto& [name, p] : model.named_parameters()) out.push_back(p.grad());
      return out;
    };
    const std::vector<Tensor> plain = run(false), checkpointed = run(true);
    ASSERT_EQ(plain.size(), checkpointed.size());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TENSOR_EQ(checkpointed[i], plain[i]);
  }
}

// Generation: a prompt past gpt-oss's window, then one token a step; each step's logits are the
// full forward's (sinks and windows in the cached attention, experts for one token).
TEST(MoeModels, CachedForwardMatchesTheFullForward) {
  for (const std::string& arch : kMoeArchitectures) {
    SCOPED_TRACE(arch);
    Generator gen(9);
    nn::MoeForCausalLM model(tiny_moe(arch), gen);
    NoGradGuard no_grad;
    const Tensor ids = randint(0, 64, {2, 12}, gen);
    const Tensor full = model.forward(ids);
    const nn::ModelDims d = model.dims();
    nn::KVCache cache(d.num_layers, 2, d.kv_heads, d.head_dim, 12, {kFloat32});
    EXPECT_TENSOR_NEAR(model.logits(model.hidden_states(slice(ids, 1, 0, 7), cache)), slice(full, 1, 0, 7), 2e-5, 2e-5);
    for (int64_t t = 7; t < 12; ++t)
      EXPECT_TENSOR_NEAR(model.logits(model.hidden_states(slice(ids, 1, t, t + 1), cache)), slice(full, 1, t, t + 1),
                         2e-5, 2e-5)
          << "step " << t;
  }
}

// Every parameter of the families, sinks and router biases included, gets the gradient finite
// differences give in float64 (a few of each kind: the rest are the same code).
TEST(MoeModels, GradientsMatchFiniteDifferences) {
  for (const std::string& arch : kMoeArchitectures) {
    SCOPED_TRACE(arch);
    nn::MoeConfig c = tiny_moe(arch);
    c.output_router_logits = true;
    Generator gen(10);
    nn::MoeForCausalLM model(c, gen);
    model.to(kFloat64);
    const Tensor ids = randint(0, c.base.vocab_size, {1, 7}, gen);
    std::vector<Tensor> wrt;  // the block's own are checked above: its router and the sinks here
    for (auto& [name, p] : model.named_parameters())
      if (name.find("layers.0.") != std::string::npos &&
          (name.ends_with("sinks") || name.find(".mlp.gate.") != std::string::npos ||
           name.find(".mlp.router.") != std::string::npos))
        wrt.push_back(p);
    ASSERT_GE(wrt.size(), 1u);
    EXPECT_GRADCHECK([&] { return model.loss(ids, ids); }, wrt, {.atol = 1e-7, .rtol = 1e-5});
  }
}

// The released configs read as transformers reads them, and back through config_json.
// transformers 5.17's GptOssExperts clamps at 7.0 with alpha 1.702 whatever config.json's
// swiglu_limit says (HfFixtures.GptOssMatchesTransformersAndPeft's fixture says 1.5): the model
// computes so, and writes config.json's value back.
TEST(MoeConfigs, GptOssClampsAtTransformersLimitWhateverSwigluLimitSays) {
  nn::MoeConfig c = tiny_moe("GptOssForCausalLM");
  ASSERT_EQ(c.swiglu_limit, 0.5);
  Generator gen(12);
  nn::MoeForCausalLM model(c, gen);
  int64_t blocks = 0;
  for (auto& [name, m] : model.named_modules())
    if (auto* block = dynamic_cast<nn::SparseMoeBlock*>(m)) {
      EXPECT_EQ(block->options.swiglu_limit, 7.0) << name;
      EXPECT_EQ(block->experts->options.swiglu_alpha, 1.702) << name;
      ++blocks;
    }
  EXPECT_EQ(blocks, c.base.num_hidden_layers);
  c.swiglu_limit = 7.0;
  Generator same(12);
  const Tensor ids = randint(0, 64, {2, 9}, gen);
  EXPECT_TENSOR_EQ(model.forward(ids), nn::MoeForCausalLM(c, same).forward(ids));
  EXPECT_EQ(model.config_json().find("swiglu_limit")->as_double(), 0.5);
}

TEST(MoeConfigs, ReleasedConfigsReadAndRoundTrip) {
  const nn::MoeConfig qwen =
      std::any_cast<nn::MoeConfig>(nn::parse_pretrained_config(read_text(kMoeConfigs / "Qwen3-30B-A3B.json")).config);
  EXPECT_EQ(qwen.num_experts, 128);
  EXPECT_EQ(qwen.num_experts_per_tok, 8);
  EXPECT_EQ(qwen.moe_intermediate_size, 768);
  EXPECT_TRUE(qwen.norm_topk_prob);
  EXPECT_TRUE(qwen.base.qk_norm);
  EXPECT_EQ(qwen.base.head_dim(), 128);
  EXPECT_EQ(qwen.max_window_layers, 48);
  const nn::DecoderSpec qs = nn::moe_spec(qwen);
  EXPECT_EQ(qs.moe->block.intermediate_size, 768);
  EXPECT_EQ(qs.intermediate_size, 6144);  // a dense layer's (mlp_only_layers), none here
  EXPECT_EQ(qs.attention.sliding_window, 0);

  const nn::MoeConfig oss =
      std::any_cast<nn::MoeConfig>(nn::parse_pretrained_config(read_text(kMoeConfigs / "gpt-oss-20b.json")).config);
  EXPECT_EQ(oss.num_experts, 32);
  EXPECT_EQ(oss.num_experts_per_tok, 4);
  EXPECT_EQ(oss.expert_intermediate_size(), 2880);
  EXPECT_EQ(oss.base.head_dim(), 64);
  EXPECT_TRUE(oss.base.attention_bias);
  EXPECT_EQ(oss.base.sliding_window, 128);
  EXPECT_EQ(oss.base.rope_theta, 150000.0);
  EXPECT_EQ(oss.base.rope_scaling.rope_type, "yarn");
  EXPECT_FALSE(oss.base.rope_scaling.truncate);
  EXPECT_EQ(oss.base.rope_scaling.factor, 32.0);
  EXPECT_EQ(oss.base.rope_scaling.original_max_position_embeddings, 4096);
  ASSERT_EQ(oss.sliding_layers.size(), 24u);
  EXPECT_TRUE(oss.sliding_layers[0]);
  EXPECT_FALSE(oss.sliding_layers[1]);
  EXPECT_EQ(oss.swiglu_limit, 7.0);
  const nn::DecoderSpec os = nn::moe_spec(oss);
  EXPECT_TRUE(os.attention.sinks && os.attention.qkv_bias && os.attention.o_bias);
  EXPECT_EQ(os.moe->block.routing, Routing::TopKSoftmax);

  for (const std::string& arch : kMoeArchitectures) {  // config_json reads back as the same config
    SCOPED_TRACE(arch);
    Generator gen(1);
    nn::MoeForCausalLM model(tiny_moe(arch), gen);
    const json::Value written = model.config_json();
    const nn::MoeConfig back = std::any_cast<nn::MoeConfig>(nn::parse_pretrained_config(json::dump(written)).config);
    EXPECT_EQ(json::dump(nn::MoeForCausalLM(back, gen).config_json()), json::dump(written));
  }
}

TEST(MoeConfigs, UnimplementedOptionsAreRefusedByName) {
  json::Value qwen = json::parse(read_text(kMoeConfigs / "Qwen3-30B-A3B.json"));
  json::Value oss = json::parse(read_text(kMoeConfigs / "gpt-oss-20b.json"));
  auto with = [](json::Value v, const std::string& key, json::Value value) {
    return json::dump(v.set(key, std::move(value)));
  };
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(qwen, "use_sliding_window", true)), "use_sliding_window = true");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(qwen, "mlp_only_layers", json::Value::array({48}))),
                   "mlp_only_layers", "[0, 48)");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(qwen, "num_experts_per_tok", 129)), "num_experts_per_tok 129");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(qwen, "hidden_act", "gelu")), "hidden_act = \"gelu\"");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(oss, "layer_types", json::Value::array({"full_attention"}))),
                   "layer_types", "one entry per layer");
  EXPECT_ERROR_HAS(
      nn::parse_pretrained_config(with(oss, "quantization_config", json::Value::object().set("quant_method", "fp8"))),
      "quantization_config", "mxfp4");
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(oss, "experts_per_token", 2)), "experts_per_token");
  json::Value mixtral = json::parse(json::dump(tiny_moe_json("MixtralForCausalLM")));
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(with(mixtral, "router_jitter_noise", 0.01)),
                   "router_jitter_noise = 0.01");
  // the released gpt-oss folder's quantization_config is read (its experts dequantised on load)
  EXPECT_NO_THROW(
      nn::parse_pretrained_config(with(oss, "quantization_config",
                                       json::Value::object()
                                           .set("quant_method", "mxfp4")
                                           .set("modules_to_not_convert", json::Value::array({"lm_head"})))));
}

// save_pretrained writes the hub's per-expert tensors, as transformers 5 does; from_pretrained
// reads them and the fused layout alike, bitwise.
TEST(MoeCheckpoints, HubAndFusedLayoutsLoadAlike) {
  for (const std::string& arch : kMoeArchitectures) {
    SCOPED_TRACE(arch);
    Generator gen(3);
    nn::MoeForCausalLM model(tiny_moe(arch), gen);
    TempDir dir;
    nn::save_pretrained(model, dir / "hub");
    const safetensors::TensorMap hub = safetensors::load_file(dir / "hub/model.safetensors");
    std::set<std::string> keys;
    for (const auto& [k, t] : hub) keys.insert(k);
    if (arch == "Qwen3MoeForCausalLM") {
      EXPECT_TRUE(keys.count("model.layers.0.mlp.experts.3.up_proj.weight"));
      EXPECT_TRUE(keys.count("model.layers.0.mlp.gate.weight"));
      EXPECT_TRUE(keys.count("model.layers.1.mlp.gate_proj.weight"));  // the dense layer
      EXPECT_TENSOR_EQ(
          hub.at("model.layers.0.mlp.experts.3.up_proj.weight"),
          slice(squeeze(slice(model.get_parameter("model.layers.0.mlp.experts.gate_up_proj"), 0, 3, 4), 0), 0, 12, 24));
    } else if (arch == "MixtralForCausalLM") {
      EXPECT_TRUE(keys.count("model.layers.1.block_sparse_moe.experts.2.w3.weight"));
      EXPECT_TRUE(keys.count("model.layers.1.block_sparse_moe.gate.weight"));
      EXPECT_TENSOR_EQ(hub.at("model.layers.1.block_sparse_moe.experts.2.w2.weight"),
                       squeeze(slice(model.get_parameter("model.layers.1.mlp.experts.down_proj"), 0, 2, 3), 0));
    } else {
      EXPECT_TRUE(keys.count("model.layers.0.mlp.experts.gate_up_proj"));
      EXPECT_TRUE(keys.count("model.layers.0.mlp.router.bias"));
      EXPECT_TRUE(keys.count("model.layers.0.self_attn.sinks"));
    }
    if (arch != "GptOssForCausalLM")  // nothing fused left
      for (const auto& k : keys) EXPECT_EQ(k.find("gate_up_proj"), std::string::npos) << k;
    const Tensor ids = randint(0, 64, {2, 6}, gen);
    const Tensor want = model.forward(ids);
    EXPECT_TENSOR_EQ(nn::from_pretrained(dir / "hub")->forward(ids), want);
    // transformers' own names, fused (what its state_dict holds)
    nn::save_pretrained(model, dir / "fused");
    safetensors::save_file(model.state_dict(), dir / "fused/model.safetensors", {{"format", "pt"}});
    EXPECT_TENSOR_EQ(nn::from_pretrained(dir / "fused")->forward(ids), want);
  }
}

TEST(MoeCheckpoints, MissingExpertsAndMixedLayoutsAreNamed) {
  Generator gen(4);
  nn::MoeForCausalLM model(tiny_moe("Qwen3MoeForCausalLM"), gen);
  TempDir dir;
  nn::save_pretrained(model, dir / "m");
  safetensors::TensorMap hub = safetensors::load_file(dir / "m/model.safetensors");
  hub.erase("model.layers.0.mlp.experts.2.gate_proj.weight");
  safetensors::save_file(hub, dir / "m/model.safetensors", {{"format", "pt"}});
  EXPECT_ERROR_HAS(nn::from_pretrained(dir / "m"), "missing (1)", "model.layers.0.mlp.experts.gate_up_proj",
                   "of its 1536 values");
  hub.emplace("model.layers.0.mlp.experts.2.gate_proj.weight", zeros({12, 16}));
  hub.emplace("model.layers.0.mlp.experts.gate_up_proj", zeros({4, 24, 16}));
  safetensors::save_file(hub, dir / "m/model.safetensors", {{"format", "pt"}});
  EXPECT_ERROR_HAS(nn::from_pretrained(dir / "m"), "model.layers.0.mlp.experts.gate_up_proj",
                   "both whole and in parts");
  hub.erase("model.layers.0.mlp.experts.gate_up_proj");
  hub.emplace("model.layers.0.mlp.experts.4.gate_proj.weight", zeros({12, 16}));
  safetensors::save_file(hub, dir / "m/model.safetensors", {{"format", "pt"}});
  EXPECT_ERROR_HAS(nn::from_pretrained(dir / "m"), "model.layers.0.mlp.experts.4.gate_proj.weight", "expert 4",
                   "[4, 24, 16]");
}

// MXFP4 by hand: the e2m1 table, the low nibble first, an E8M0 scale per 32 values.
TEST(Mxfp4, DequantisesAHandMadeBlock) {
  // one expert, 2 rows, 32 columns: row 0 bytes 0x21 (1.0 then 0.5 ...) at scale 2^1, row 1 0xF8 at 2^-2
  std::vector<uint8_t> blocks(2 * 16), scales = {128, 125};
  for (int b = 0; b < 16; ++b) blocks[b] = 0x21, blocks[16 + b] = 0xF8;
  blocks[5] = 0x7A;  // -1.0 (low nibble A) then 6.0 (high nibble 7)
  const Tensor w =
      nn::detail::dequantize_mxfp4(bytes_tensor(blocks, {1, 2, 1, 16}), bytes_tensor(scales, {1, 2, 1}), "w");
  ASSERT_EQ(w.shape(), (Shape{1, 32, 2}));  // [E, C, R]: transposed
  const std::vector<float> v = to(w, kFloat32).to_vector<float>();
  EXPECT_EQ(v[0 * 2 + 0], 1.0f);    // row 0, element 0: low nibble 1 (0.5) * 2
  EXPECT_EQ(v[1 * 2 + 0], 2.0f);    // element 1: high nibble 2 (1.0) * 2
  EXPECT_EQ(v[10 * 2 + 0], -2.0f);  // byte 5's low nibble A (-1.0) * 2
  EXPECT_EQ(v[11 * 2 + 0], 12.0f);  // its high nibble 7 (6.0) * 2
  EXPECT_EQ(v[0 * 2 + 1], -0.0f);   // row 1: low nibble 8 (-0) / 4
  EXPECT_TRUE(std::signbit(v[0 * 2 + 1]));
  EXPECT_EQ(v[1 * 2 + 1], -1.5f);  // high nibble F (-6) / 4
  EXPECT_ERROR_HAS(nn::detail::dequantize_mxfp4(bytes_tensor(blocks, {1, 2, 16}), bytes_tensor(scales, {1, 2, 1}), "w"),
                   "'w_blocks'", "not MXFP4");
}

// A gpt-oss folder with MXFP4 experts (quantization_config quant_method "mxfp4") loads with them
// dequantised: its weights are the float weights they encode, in the model's dtype.
TEST(Mxfp4, GptOssFolderLoadsDequantised) {
  nn::MoeConfig c = tiny_moe("GptOssForCausalLM");
  c.base.hidden_size = 32;  // whole blocks of 32 along the input dims
  c.base.intermediate_size = 32;
  Generator gen(6);
  nn::MoeForCausalLM model(c, gen);
  TempDir dir;
  nn::save_pretrained(model, dir / "m");
  write_mxfp4_experts(dir / "m", model);
  auto loaded = nn::from_pretrained(dir / "m");
  for (const auto& [name, t] : model.state_dict()) EXPECT_TENSOR_EQ(loaded->get_parameter(name), t) << name;
  // without quantization_config the halves are unexpected tensors
  json::Value config = json::parse(read_text(dir / "m/config.json"));
  config.set("quantization_config", json::Value());
  io::write_file_atomic(dir / "m/config.json", json::dump(config));
  EXPECT_ERROR_HAS(nn::from_pretrained(dir / "m"), "unexpected", "gate_up_proj_blocks");
}

// peft's target_parameters: per expert W_e + (alpha / r) B_e A_e with A_e = rows e * r of lora_A and
// B_e = columns e, E + e, ... of lora_B, written out here by loops.
TEST(MoeLora, ExpertAdaptersComputePeftsDelta) {
  for (const std::string& arch : kMoeArchitectures) {
    SCOPED_TRACE(arch);
    Generator gen(7);
    auto model = std::make_shared<nn::MoeForCausalLM>(tiny_moe(arch), gen);
    model->to(kFloat64);
    const Tensor ids = randint(0, 64, {2, 6}, gen);
    peft::LoraConfig cfg{.r = 3, .lora_alpha = 6, .target_modules = {"q_proj"}, .target_parameters = kExpertTargets};
    peft::apply_lora(*model, cfg, gen);
    randomise_lora(*model, gen);
    const Tensor adapted = model->forward(ids);
    // the same model without LoRA, its expert weights W + delta by the loops below
    Generator gen2(7);
    auto plain = std::make_shared<nn::MoeForCausalLM>(tiny_moe(arch), gen2);
    plain->to(kFloat64);
    NoGradGuard g;
    for (auto& [name, p] : plain->named_parameters())
      if (!name.ends_with("gate_up_proj") && !name.ends_with("down_proj") && !name.ends_with("q_proj.weight"))
        copy_(p, model->get_parameter(name));
    for (auto& [path, l] : peft::lora_experts(*model))
      for (const std::string& p : l->parameters) {
        const Tensor w = model->get_parameter(path + "." + p);
        const bool transposed = arch == "GptOssForCausalLM";  // [E, in, out]
        const int64_t E = w.shape()[0], out = transposed ? w.shape()[2] : w.shape()[1],
                      in = transposed ? w.shape()[1] : w.shape()[2], r = 3;
        const V A = l->adapters.at(p)->lora_A->weight.to_vector<double>(),
                B = l->adapters.at(p)->lora_B->weight.to_vector<double>();
        V merged = w.to_vector<double>();
        for (int64_t e = 0; e < E; ++e)
          for (int64_t o = 0; o < out; ++o)
            for (int64_t i = 0; i < in; ++i) {
              double d = 0;
              for (int64_t k = 0; k < r; ++k) d += B[o * (r * E) + k * E + e] * A[(e * r + k) * in + i];
              merged[transposed ? (e * in + i) * out + o : (e * out + o) * in + i] += 2.0 * d;
            }
        copy_(plain->get_parameter(path + "." + p), from_vector(merged, w.shape()));
      }
    for (auto& [path, l] : peft::lora_layers(*model))
      copy_(plain->get_parameter(path + ".weight"), add(l->weight, l->delta_weight()));
    EXPECT_TENSOR_NEAR(plain->forward(ids), adapted, 1e-10, 1e-10);
    // merge gives the same, unmerge restores
    const Tensor before = clone_data(model->get_parameter("model.layers.0.mlp.experts.down_proj"));
    peft::merge(*model);
    EXPECT_TENSOR_NEAR(model->forward(ids), adapted, 1e-10, 1e-10);
    peft::unmerge(*model);
    EXPECT_TENSOR_NEAR(model->get_parameter("model.layers.0.mlp.experts.down_proj"), before, 1e-12, 1e-12);
  }
}

// The adapter file holds peft's keys and shapes (gate_up_proj's wrapper inside down_proj's:
// ".base_layer"), loads back into a fresh model, and trains only the adapters (no expert dW).
TEST(MoeLora, AdapterFilesAsPeftSavesThem) {
  Generator gen(8);
  const nn::MoeConfig c = tiny_moe("Qwen3MoeForCausalLM");
  auto model = std::make_shared<nn::MoeForCausalLM>(c, gen);
  peft::LoraConfig cfg{
      .r = 2, .lora_alpha = 4, .target_modules = {"q_proj", "v_proj"}, .target_parameters = kExpertTargets};
  const peft::LoraReport report = peft::apply_lora(*model, cfg, gen);
  EXPECT_EQ(report.wrapped_parameters, (std::vector<std::string>{"model.layers.0.mlp.experts.gate_up_proj",
                                                                 "model.layers.0.mlp.experts.down_proj"}));
  randomise_lora(*model, gen);
  TempDir dir;
  peft::save_adapter(*model, dir / "a", cfg);
  const safetensors::TensorMap file = safetensors::load_file(dir / "a/adapter_model.safetensors");
  const std::string at = "base_model.model.model.layers.0.mlp.experts.";
  EXPECT_EQ(file.at(at + "base_layer.lora_A.weight").shape(), (Shape{2 * 4, 16}));  // gate_up_proj: [r E, H]
  EXPECT_EQ(file.at(at + "base_layer.lora_B.weight").shape(), (Shape{24, 2 * 4}));  // [2I, r E]
  EXPECT_EQ(file.at(at + "lora_A.weight").shape(), (Shape{2 * 4, 12}));             // down_proj: [r E, I]
  EXPECT_EQ(file.at(at + "lora_B.weight").shape(), (Shape{16, 2 * 4}));
  EXPECT_EQ(file.size(), 2u * 2 + 2 * 2 * 2);  // the experts of layer 0, q_proj and v_proj of both layers
  const json::Value written = json::parse(read_text(dir / "a/adapter_config.json"));
  EXPECT_EQ(json::dump(written.at("target_parameters")),
            json::dump(json::Value::array({"mlp.experts.gate_up_proj", "mlp.experts.down_proj"})));
  const Tensor ids = randint(0, 64, {2, 6}, gen);
  Generator gen2(8);
  auto fresh = std::make_shared<nn::MoeForCausalLM>(c, gen2);
  peft::load_adapter(*fresh, dir / "a");
  EXPECT_TENSOR_EQ(fresh->forward(ids), model->forward(ids));

  KernelTrace trace;
  fresh->loss(ids, ids).backward();
  EXPECT_TRUE(trace.contains("grouped_mm.dA") && trace.contains("grouped_mm.dB"));
  EXPECT_FALSE(trace.contains("grouped_mm.dweight_gemm"));
  for (auto& [path, l] : peft::lora_experts(*fresh))
    for (const std::string& p : l->parameters) EXPECT_TRUE(l->adapters.at(p)->lora_B->weight.grad().defined()) << p;

  peft::merge_and_unload(*fresh);
  EXPECT_TRUE(peft::lora_experts(*fresh).empty());
  EXPECT_TENSOR_NEAR(fresh->forward(ids), model->forward(ids), 1e-5, 1e-5);
  EXPECT_ERROR_HAS(
      peft::apply_lora(*fresh, {.target_modules = {"q_proj"}, .target_parameters = {"mlp.experts.up_proj"}}),
      "target_parameters entry 'mlp.experts.up_proj'", "names no expert weight");
  EXPECT_ERROR_HAS(peft::apply_lora(*fresh, {.lora_dropout = 0.1, .target_parameters = kExpertTargets}), "lora_dropout",
                   "target_parameters");
  EXPECT_ERROR_HAS(peft::apply_lora(*fresh, {.target_modules = {"experts"}}), "LoRA wraps Linear layers only",
                   "target_parameters");
}

// A bfloat16 base with float32 adapters (peft's autocast_adapter_dtype) trains, its expert
// adapters' gradients in float32.
TEST(MoeLora, Bfloat16BaseFloat32Adapters) {
  Generator gen(9);
  auto model = std::make_shared<nn::MoeForCausalLM>(tiny_moe("GptOssForCausalLM"), gen);
  model->to(kBFloat16);
  peft::apply_lora(*model, {.target_modules = {"q_proj"}, .target_parameters = kExpertTargets}, gen);
  randomise_lora(*model, gen);
  const Tensor ids = randint(0, 64, {2, 6}, gen);
  Tensor loss = model->loss(ids, ids);
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item()));
  for (auto& [path, l] : peft::lora_experts(*model))
    for (const std::string& p : l->parameters) {
      EXPECT_EQ(l->adapters.at(p)->lora_A->weight.dtype(), kFloat32);
      EXPECT_EQ(l->adapters.at(p)->lora_A->weight.grad().dtype(), kFloat32);
    }
}

}  // namespace
}  // namespace tg::test
