// nn: Module registry semantics, layers (float64 gradchecks), attention and rotary against hand
// computations, the toy Llama and GPT-2 models (names, counts, causality, state dicts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "nn/nn.h"
#include "ops/attention.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/reduce.h"
#include "ops/apply_rotary.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "optim/optimizer.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

using nn::LlamaConfig;

std::vector<std::string> names_of(const nn::NamedTensors& xs) {
  std::vector<std::string> out;
  for (const auto& [n, t] : xs) out.push_back(n);
  return out;
}

// A two-level custom module, as a user would write one.
struct Block : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::RMSNorm> norm;
  Tensor scale;
  Tensor counter;  // a persistent integer buffer
  Block(Generator& gen) : Module("Block") {
    fc1 = std::make_shared<nn::Linear>(4, 6, true, gen);
    fc2 = std::make_shared<nn::Linear>(6, 4, false, gen);
    norm = std::make_shared<nn::RMSNorm>(4);
    scale = ones({1}, {kFloat32});
    counter = zeros({1}, {kInt64});
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("norm", norm);
    register_parameter("scale", scale);
    register_buffer("counter", counter);
  }
  Tensor forward(const Tensor& x) override { return mul(fc2->forward(relu(fc1->forward(norm->forward(x)))), scale); }
};

// A small Llama for gradchecks: 2 layers, 2 query heads sharing 1 kv head.
LlamaConfig micro_llama() {
  LlamaConfig c;
  c.vocab_size = 11;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.max_position_embeddings = 8;
  return c;
}

class NnTest : public testing::SeededTest {};

// ---------------------------------------------------------------- Module

TEST_F(NnTest, ModuleNamesOrderAndCounts) {
  Block b(gen);
  EXPECT_EQ(names_of(b.named_parameters()),
            (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight", "norm.weight"}));
  EXPECT_EQ(b.num_parameters(), 1 + 24 + 6 + 24 + 4);
  EXPECT_EQ(b.parameters().size(), 5u);
  EXPECT_EQ(names_of(b.named_buffers()), std::vector<std::string>{"counter"});
  std::vector<std::string> mods;
  for (auto& [n, m] : b.named_modules()) mods.push_back(n + ":" + m->type_name());
  EXPECT_EQ(mods, (std::vector<std::string>{":Block", "fc1:Linear", "fc2:Linear", "norm:RMSNorm"}));
  auto sd = b.state_dict();
  EXPECT_EQ(sd.size(), 6u);  // 5 parameters + the persistent buffer
  EXPECT_TRUE(sd.count("counter"));
  EXPECT_TRUE(b.get_submodule("fc1") == b.fc1);
  EXPECT_TRUE(b.get_parameter("fc1.bias").same(b.fc1->bias));
  EXPECT_NE(error_of([&] { b.get_submodule("fc3"); }).find("no submodule 'fc3'"), std::string::npos);
  EXPECT_NE(b.str().find("(fc1): Linear(in_features=4, out_features=6, bias=true)"), std::string::npos) << b.str();
}

TEST_F(NnTest, ModuleRejectsBadRegistrations) {
  struct Bad : nn::Module {
    Tensor w = zeros({2}), v = zeros({2});
    Bad() : Module("Bad") {
      register_parameter("w", w);
      register_parameter("w", v);
    }
  };
  EXPECT_NE(error_of([] { Bad b; }).find("'w' is already a parameter"), std::string::npos);
  struct Dotted : nn::Module {
    Tensor w = zeros({2});
    Dotted() : Module("Dotted") { register_parameter("a.b", w); }
  };
  EXPECT_THROW(Dotted{}, Error);
}

TEST_F(NnTest, FreezingTrainEvalAndZeroGrad) {
  Block b(gen);
  b.fc1->requires_grad_(false);
  EXPECT_EQ(names_of(b.named_trainable_parameters()),
            (std::vector<std::string>{"scale", "fc2.weight", "norm.weight"}));
  EXPECT_EQ(b.num_parameters(true), 1 + 24 + 4);
  Tensor x = randn({3, 4}, gen);
  sum(b.forward(x)).backward();
  EXPECT_FALSE(b.fc1->weight.grad().defined());
  EXPECT_TRUE(b.fc2->weight.grad().defined());
  b.zero_grad();
  for (auto& p : b.parameters()) EXPECT_FALSE(p.grad().defined());

  EXPECT_TRUE(b.is_training() && b.fc1->is_training());
  b.eval();
  EXPECT_FALSE(b.is_training() || b.fc1->is_training() || b.norm->is_training());
  b.train();
  EXPECT_TRUE(b.fc2->is_training());
}

TEST_F(NnTest, ReplaceModuleAssignsThroughTheMember) {
  Block b(gen);
  auto other = std::make_shared<nn::Linear>(4, 6, false, gen);
  b.replace_module("fc1", other);
  EXPECT_TRUE(b.fc1 == other) << "the typed member sees the new module";
  EXPECT_EQ(b.state_dict().count("fc1.bias"), 0u);
  // The member is a shared_ptr<Linear>: an RMSNorm cannot go there.
  EXPECT_NE(error_of([&] { b.replace_module("fc1", std::make_shared<nn::RMSNorm>(4)); }).find("cannot hold a RMSNorm"),
            std::string::npos);
  EXPECT_THROW(b.replace_module("nope", other), Error);
}

TEST_F(NnTest, ToDTypeAndDeviceChangeDataInPlace) {
  Block b(gen);
  Tensor w = b.fc1->weight;  // a handle held elsewhere (as an optimizer does)
  b.fc2->requires_grad_(false);
  sum(b.forward(randn({2, 4}, gen))).backward();
  std::vector<double> before = w.to_vector<double>();
  b.to(kFloat64);
  EXPECT_EQ(w.dtype(), kFloat64) << "the outside handle sees the cast";
  EXPECT_TRUE(w.requires_grad() && w.is_leaf());
  EXPECT_FALSE(b.fc2->weight.requires_grad());
  EXPECT_EQ(w.grad().dtype(), kFloat64) << "existing grads follow";
  EXPECT_EQ(w.to_vector<double>(), before);
  EXPECT_EQ(b.counter.dtype(), kInt64) << "integer buffers keep their dtype";
  EXPECT_EQ(b.forward(randn({2, 4}, gen, {kFloat64})).dtype(), kFloat64);
  b.to(Device::cpu());  // no-op on a CPU build
  EXPECT_THROW(b.to(kInt32), Error);
}

TEST_F(NnTest, StateDictRoundTripAndStrictErrorsListEverything) {
  Block a(gen), b(gen);
  b.load_state_dict(a.state_dict());
  Tensor x = randn({2, 4}, gen);
  EXPECT_TENSOR_EQ(b.forward(x), a.forward(x));

  auto sd = a.state_dict();
  sd.erase("fc2.weight");
  sd.erase("scale");
  sd["extra.weight"] = zeros({3});
  sd["fc1.bias"] = zeros({7});
  std::string msg = error_of([&] { b.load_state_dict(sd); });
  EXPECT_NE(msg.find("4 problem(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing keys (2): fc2.weight, scale"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected keys (1): extra.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fc1.bias (checkpoint [7], model [6])"), std::string::npos) << msg;

  sd["fc1.bias"] = a.fc1->bias;
  nn::LoadResult r = b.load_state_dict(sd, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"fc2.weight", "scale"}));
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"extra.weight"});
  sd["fc1.bias"] = zeros({7});
  EXPECT_THROW(b.load_state_dict(sd, false), Error) << "a shape mismatch fails even when not strict";
  // Loading converts dtype.
  auto sd64 = a.state_dict();
  for (auto& [k, t] : sd64)
    if (is_floating_point(t.dtype())) t = to(t, kFloat64);
  b.load_state_dict(sd64);
  EXPECT_EQ(b.fc1->weight.dtype(), kFloat32);
  EXPECT_TENSOR_EQ(b.fc1->weight, a.fc1->weight);
}

// ---------------------------------------------------------------- layers: float64 gradchecks

TEST_F(NnTest, GradcheckLinearEmbeddingNorms) {
  nn::Linear lin(5, 3, true, gen);
  lin.to(kFloat64);
  Tensor x = randn({2, 4, 5}, gen, {kFloat64, Device::cpu(), true});
  EXPECT_GRADCHECK([&] { return lin.forward(x); }, {x, lin.weight, lin.bias});

  nn::Embedding emb(7, 3, gen);
  emb.to(kFloat64);
  Tensor ids = from_vector<int64_t>({1, 6, 1, 0}, {2, 2});
  EXPECT_GRADCHECK([&] { return emb.forward(ids); }, {emb.weight});

  nn::RMSNorm rms(6);
  rms.to(kFloat64);
  nn::init::normal_(rms.weight, 1.0, 0.5, gen);
  Tensor y = randn({3, 6}, gen, {kFloat64, Device::cpu(), true});
  EXPECT_GRADCHECK([&] { return rms.forward(y); }, {y, rms.weight});

  nn::LayerNorm ln(6);
  ln.to(kFloat64);
  nn::init::normal_(ln.weight, 1.0, 0.5, gen);
  nn::init::normal_(ln.bias, 0.0, 0.5, gen);
  EXPECT_GRADCHECK([&] { return ln.forward(y); }, {y, ln.weight, ln.bias});
}

TEST_F(NnTest, GradcheckMlpsAttentionAndBlocks) {
  nn::GatedMLP swiglu(6, 10, {}, gen);
  swiglu.to(kFloat64);
  Tensor x = randn({2, 3, 6}, gen, {kFloat64, Device::cpu(), true});
  EXPECT_GRADCHECK([&] { return swiglu.forward(x); }, {x, swiglu.gate_proj->weight, swiglu.up_proj->weight,
                                                         swiglu.down_proj->weight});
  nn::GELUMLP gelu_mlp(6, 10, true, 0.0, gen);
  gelu_mlp.to(kFloat64);
  EXPECT_GRADCHECK([&] { return gelu_mlp.forward(x); }, {x, gelu_mlp.c_fc->weight, gelu_mlp.c_fc->bias,
                                                           gelu_mlp.c_proj->weight});

  nn::CausalSelfAttention attn(8, 4, 2, false, gen);  // grouped-query: 2 kv heads for 4 heads
  nn::RotaryEmbedding rope(2, 16);
  attn.to(kFloat64);
  rope.to(kFloat64);
  Tensor cos, sin;  // not a structured binding: clang 14 cannot capture one in a lambda
  std::tie(cos, sin) = rope.cos_sin(5);
  Tensor h = randn({2, 5, 8}, gen, {kFloat64, Device::cpu(), true});
  EXPECT_GRADCHECK([&] { return attn.forward(h, cos, sin); },
                   {h, attn.q_proj->weight, attn.k_proj->weight, attn.v_proj->weight, attn.o_proj->weight});

  nn::GPT2Config gc = nn::GPT2Config::tiny();
  gc.n_embd = 8;
  gc.n_head = 2;
  nn::GPT2Block block(gc, gen);
  block.to(kFloat64);
  Tensor g = randn({1, 4, 8}, gen, {kFloat64, Device::cpu(), true});
  EXPECT_GRADCHECK([&] { return block.forward(g); }, {g, block.ln_1->weight, block.attn->c_attn->weight,
                                                        block.attn->c_attn->bias, block.mlp->c_proj->weight});
}

TEST_F(NnTest, GradcheckWholeLlamaAndLoss) {
  nn::LlamaForCausalLM model(micro_llama(), gen);
  model.to(kFloat64);
  Tensor ids = from_vector<int64_t>({1, 4, 9, 2, 0, 3, 10, 5}, {2, 4});
  auto& l0 = (*model.model->layers)[0];
  EXPECT_GRADCHECK([&] { return model.forward(ids); },
                   {model.model->embed_tokens->weight, l0.input_layernorm->weight, l0.self_attn->k_proj->weight,
                    l0.mlp->down_proj->weight, model.model->norm->weight, model.lm_head->weight});
  Tensor labels = from_vector<int64_t>({1, 4, -100, 2, 0, 3, 10, -100}, {2, 4});
  EXPECT_GRADCHECK([&] { return model.loss(ids, labels); }, {model.lm_head->weight, l0.self_attn->q_proj->weight});
}

// ---------------------------------------------------------------- attention and rotary by hand

TEST_F(NnTest, SdpaCausalByHand) {
  // one head, E = 1: q = [1, 2], k = [1, 1], v = [10, 20]
  Tensor q = from_vector<double>({1, 2}, {1, 1, 2, 1}), k = from_vector<double>({1, 1}, {1, 1, 2, 1});
  Tensor v = from_vector<double>({10, 20}, {1, 1, 2, 1});
  // causal: query 0 sees key 0 only -> 10; query 1 sees both with equal scores -> 15
  EXPECT_TENSOR_NEAR(scaled_dot_product_attention(q, k, v, true), from_vector<double>({10, 15}, {1, 1, 2, 1}), 0, 1e-12);
  // not causal: query 0 scores [1, 1] -> 15; query 1 scores [2, 2] -> 15
  EXPECT_TENSOR_NEAR(scaled_dot_product_attention(q, k, v, false), from_vector<double>({15, 15}, {1, 1, 2, 1}), 0,
                     1e-12);
  // keys with different scores: q = 1, k = [0, ln 3], scale 1 -> weights [1/4, 3/4]
  Tensor k2 = from_vector<double>({0, std::log(3.0)}, {1, 1, 2, 1});
  Tensor q2 = from_vector<double>({1, 1}, {1, 1, 2, 1});
  EXPECT_TENSOR_NEAR(scaled_dot_product_attention(q2, k2, v, false, 1.0), from_vector<double>({17.5, 17.5}, {1, 1, 2, 1}),
                     0, 1e-12);
  EXPECT_EQ(causal_mask(2, 3).to_vector<bool>(), (std::vector<bool>{false, true, true, false, false, true}));
  EXPECT_THROW(scaled_dot_product_attention(q, from_vector<double>({1, 1}, {1, 1, 1, 2}), v), Error);
  Tensor qg = randn({2, 3, 4, 5}, gen, {kFloat64, Device::cpu(), true});
  Tensor kg = randn({2, 3, 4, 5}, gen, {kFloat64, Device::cpu(), true});
  Tensor vg = randn({2, 3, 4, 5}, gen, {kFloat64, Device::cpu(), true});
  EXPECT_GRADCHECK([&] { return scaled_dot_product_attention(qg, kg, vg, true); }, {qg, kg, vg});
}

TEST_F(NnTest, RotaryByHand) {
  // head_dim 4, theta 10000: inv_freq = [1, 1/100]; position t rotates (x0, x2) by t rad and
  // (x1, x3) by t/100 rad.
  Tensor cos, sin;  // not a structured binding: clang 14 cannot capture one in a lambda
  std::tie(cos, sin) = rotary_cos_sin(3, 4);
  EXPECT_EQ(cos.shape(), Shape({3, 4}));
  std::vector<float> c = cos.to_vector<float>(), s = sin.to_vector<float>();
  EXPECT_FLOAT_EQ(c[2 * 4 + 0], std::cos(2.0f));
  EXPECT_FLOAT_EQ(c[2 * 4 + 1], std::cos(0.02f));
  EXPECT_FLOAT_EQ(c[2 * 4 + 2], std::cos(2.0f));
  EXPECT_FLOAT_EQ(s[2 * 4 + 3], std::sin(0.02f));
  Tensor x = from_vector<double>({1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}, {1, 1, 3, 4});
  std::vector<double> y = apply_rotary(x, to(cos, kFloat64), to(sin, kFloat64)).to_vector<double>();
  // position 2 (the tables are float32)
  const double ca = static_cast<float>(std::cos(2.0f)), sa = static_cast<float>(std::sin(2.0f));
  const double cb = static_cast<float>(std::cos(0.02f)), sb = static_cast<float>(std::sin(0.02f));
  EXPECT_NEAR(y[8 + 0], 1 * ca - 3 * sa, 1e-12);  // x0 cos - x2 sin
  EXPECT_NEAR(y[8 + 1], 2 * cb - 4 * sb, 1e-12);
  EXPECT_NEAR(y[8 + 2], 3 * ca + 1 * sa, 1e-12);  // x2 cos + x0 sin
  EXPECT_NEAR(y[8 + 3], 4 * cb + 2 * sb, 1e-12);
  EXPECT_NEAR(y[0], 1, 1e-12) << "position 0 is not rotated";
  Tensor xg = randn({2, 2, 3, 4}, gen, {kFloat64, Device::cpu(), true});
  EXPECT_GRADCHECK([&] { return apply_rotary(xg, to(cos, kFloat64), to(sin, kFloat64)); }, {xg});
  EXPECT_THROW(apply_rotary(xg, slice(cos, 0, 0, 2), sin), Error);
}

// Grouped-query attention = full attention whose k/v heads are copies.
TEST_F(NnTest, GroupedQueryHeadsRepeatKv) {
  nn::CausalSelfAttention gqa(8, 4, 2, false, gen), full(8, 4, 4, false, gen);
  NoGradGuard g;
  copy_(full.q_proj->weight, gqa.q_proj->weight);
  copy_(full.o_proj->weight, gqa.o_proj->weight);
  // kv head j serves query heads 2j and 2j+1: full's k heads are [k0, k0, k1, k1].
  auto rep = [](const Tensor& w) {  // [2 heads * 2, 8] -> [4 heads * 2, 8]
    std::vector<Tensor> hs = split(w, 2, 0);
    return cat({hs[0], hs[0], hs[1], hs[1]}, 0);
  };
  copy_(full.k_proj->weight, rep(gqa.k_proj->weight));
  copy_(full.v_proj->weight, rep(gqa.v_proj->weight));
  nn::RotaryEmbedding rope(2, 8);
  auto [cos, sin] = rope.cos_sin(6);
  Tensor x = randn({2, 6, 8}, gen);
  EXPECT_TENSOR_NEAR(gqa.forward(x, cos, sin), full.forward(x, cos, sin), 1e-5, 1e-6);
  EXPECT_THROW(nn::CausalSelfAttention(8, 4, 3), Error);
}

TEST_F(NnTest, DropoutTrainAndEval) {
  nn::Dropout d(0.5);
  Tensor x = ones({1000});
  std::vector<float> y = d.forward(x).to_vector<float>();
  int zeros_n = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
    zeros_n += v == 0.0f;
  }
  EXPECT_GT(zeros_n, 400);
  EXPECT_LT(zeros_n, 600);
  d.eval();
  EXPECT_TRUE(d.forward(x).same(x));
  EXPECT_THROW(nn::Dropout(1.5), Error);
}

TEST_F(NnTest, CausalLmLossShiftsLabels) {
  // Uniform logits: every counted position costs log(V).
  Tensor logits = zeros({2, 4, 5});
  Tensor labels = from_vector<int64_t>({0, 1, 2, 3, 4, 0, -100, 1}, {2, 4});
  EXPECT_NEAR(nn::causal_lm_loss(logits, labels).item(), std::log(5.0), 1e-6);
  // Equal to cross entropy of positions 0..T-2 against labels 1..T-1.
  Tensor l = randn({2, 4, 5}, gen);
  Tensor want = cross_entropy(reshape(slice(l, 1, 0, 3), {6, 5}), reshape(slice(labels, 1, 1, 4), {6}));
  EXPECT_TENSOR_NEAR(nn::causal_lm_loss(l, labels), want, 1e-6, 1e-7);
  EXPECT_THROW(nn::causal_lm_loss(l, from_vector<int64_t>({1, 2}, {1, 2})), Error);
}

// ---------------------------------------------------------------- the toy models

TEST_F(NnTest, LlamaTinyNamesAndParameterCount) {
  nn::LlamaForCausalLM model(LlamaConfig::tiny(), gen);
  // By hand from the spec (vocab 256, hidden 128, 4 layers, intermediate 344):
  //   embed_tokens 256*128 = 32768; per layer q,k,v,o 4*128*128 = 65536, gate/up/down
  //   3*128*344 = 132096, two norms 256 -> 197888; 4 layers 791552; norm 128; lm_head 32768.
  EXPECT_EQ(model.num_parameters(), 32768 + 4 * 197888 + 128 + 32768);
  EXPECT_EQ(model.num_parameters(), 857216);
  EXPECT_EQ(LlamaConfig::tiny().num_parameters(), 857216);
  auto names = names_of(model.named_parameters());
  ASSERT_EQ(names.size(), 4u * 9 + 3);
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
  EXPECT_EQ(std::vector<std::string>(names.begin() + 1, names.begin() + 10),
            (std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                                      "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
                                      "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                                      "model.layers.0.mlp.down_proj.weight", "model.layers.0.input_layernorm.weight",
                                      "model.layers.0.post_attention_layernorm.weight"}));
  EXPECT_EQ(names[names.size() - 2], "model.norm.weight");
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_EQ(model.get_parameter("model.layers.3.mlp.down_proj.weight").shape(), Shape({128, 344}));
  EXPECT_EQ(model.get_parameter("model.layers.3.self_attn.k_proj.weight").shape(), Shape({128, 128}));
  auto sd = model.state_dict();
  EXPECT_EQ(sd.size(), names.size()) << "rotary tables are not persistent";
  EXPECT_EQ(model.named_buffers().size(), 2u);
  // N(0, 0.02) init, norms at one
  std::vector<float> w = model.lm_head->weight.to_vector<float>();
  double ss = 0;
  for (float v : w) ss += v * v;
  EXPECT_NEAR(std::sqrt(ss / w.size()), 0.02, 0.001);
  EXPECT_EQ(model.model->norm->weight.to_vector<float>()[5], 1.0f);
}

// q / k / v and gate / up are consecutive row blocks of one allocation each, so the forward's
// linear_group reads them in place (no weight concatenated), and the values are the init's; a
// conversion keeps the layout.
TEST_F(NnTest, LlamaGroupsItsProjectionWeightsInOneAllocation) {
  Generator g1(3), g2(4), g3(4);
  nn::LlamaForCausalLM model(LlamaConfig::tiny(), g1);
  const std::vector<std::vector<std::string>> groups = {{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                                                        {"mlp.gate_proj", "mlp.up_proj"}};
  auto expect_adjacent = [&] {
    for (const auto& group : groups) {
      SCOPED_TRACE(group[0]);
      std::vector<Tensor> ws;
      for (const std::string& layer : group) ws.push_back(model.get_parameter("model.layers.2." + layer + ".weight"));
      for (size_t i = 1; i < ws.size(); ++i) {
        EXPECT_TRUE(ws[i].shares_storage_with(ws[0]));
        EXPECT_EQ(ws[i].storage_offset(), ws[i - 1].storage_offset() + ws[i - 1].numel());
      }
    }
  };
  expect_adjacent();
  // Module::to converts such a group into one new allocation, with each weight's own values.
  const Tensor k_float = clone(model.get_parameter("model.layers.2.self_attn.k_proj.weight"));
  model.to(kBFloat16);
  expect_adjacent();
  EXPECT_TENSOR_EQ(model.get_parameter("model.layers.2.self_attn.k_proj.weight"), to(k_float, kBFloat16));
  model.to(kFloat32);
  // The same draws as layers each holding its own weight: the move kept the values.
  nn::GatedMLP mlp(6, 10, {}, g2);
  nn::Linear gate(6, 10, false, g3), up(6, 10, false, g3);
  EXPECT_TRUE(mlp.up_proj->weight.shares_storage_with(mlp.gate_proj->weight));
  EXPECT_TENSOR_EQ(mlp.gate_proj->weight, gate.weight);
  EXPECT_TENSOR_EQ(mlp.up_proj->weight, up.weight);
  KernelTrace trace;
  model.forward(from_vector<int64_t>({1, 2, 3, 4}, {1, 4}));
  EXPECT_NE(trace.str().find("linear_group"), std::string::npos) << trace.str();
  EXPECT_EQ(trace.str().find("weights_concatenated"), std::string::npos) << trace.str();
}

TEST_F(NnTest, LlamaSmallAndBenchCounts) {
  // small: 2*256*384 + 6*(4*384^2 + 3*384*1024 + 2*384) + 384
  EXPECT_EQ(LlamaConfig::small().num_parameters(), 196608 + 6 * 1770240 + 384);
  nn::LlamaForCausalLM small(LlamaConfig::small(), gen);
  EXPECT_EQ(small.num_parameters(), 10818432);
  // bench-135m: 2*32000*768 + 12*(4*768^2 + 3*768*2048 + 2*768) + 768 (too big to build here)
  EXPECT_EQ(LlamaConfig::bench_135m().num_parameters(), 49152000 + 12 * 7079424 + 768);
  EXPECT_EQ(LlamaConfig::by_name("bench-135m").vocab_size, 32000);
  EXPECT_EQ(LlamaConfig::by_name("small").max_position_embeddings, 256);
  EXPECT_THROW(LlamaConfig::by_name("huge"), Error);
  LlamaConfig gqa = micro_llama();
  nn::LlamaForCausalLM m(gqa, gen);
  EXPECT_EQ(m.num_parameters(), gqa.num_parameters());
}

// The decoder layer (which fuses the residual adds into the norms) computes the spec's formula:
// h = x + attn(input_layernorm(x)); out = h + mlp(post_attention_layernorm(h)); with Gemma's
// sandwich norms h = x + post_attention_layernorm(attn(input_layernorm(x)));
// out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))).
TEST_F(NnTest, DecoderLayerIsThePreNormFormula) {
  LlamaConfig c = micro_llama();
  nn::DecoderLayer layer(nn::llama_spec(c), 0, gen);
  nn::init::normal_(layer.input_layernorm->weight, 1.0, 0.3, gen);
  nn::init::normal_(layer.post_attention_layernorm->weight, 1.0, 0.3, gen);
  nn::RotaryEmbedding rope(c.head_dim(), 8);
  auto [cos, sin] = rope.cos_sin(5);
  Tensor x = randn({2, 5, 8}, gen);
  Tensor h = add(x, layer.self_attn->forward(layer.input_layernorm->forward(x), cos, sin));
  Tensor want = add(h, layer.mlp->forward(layer.post_attention_layernorm->forward(h)));
  EXPECT_TENSOR_NEAR(layer.forward(x, cos, sin), want, 1e-5, 1e-6);

  nn::GemmaConfig g;
  g.hidden_size = 8, g.intermediate_size = 12, g.num_attention_heads = 2, g.num_key_value_heads = 1, g.head_dim = 4;
  nn::DecoderLayer sandwich(nn::gemma_spec(g), 1, gen);  // layer 1: global attention
  for (auto* n : {&sandwich.input_layernorm, &sandwich.post_attention_layernorm, &sandwich.pre_feedforward_layernorm,
                  &sandwich.post_feedforward_layernorm})
    nn::init::normal_((*n)->weight, 0.0, 0.3, gen);
  nn::RotaryEmbedding grope(4, 8);
  std::tie(cos, sin) = grope.cos_sin(5);
  h = add(x, sandwich.post_attention_layernorm->forward(
                 sandwich.self_attn->forward(sandwich.input_layernorm->forward(x), cos, sin)));
  want = add(h, sandwich.post_feedforward_layernorm->forward(
                    sandwich.mlp->forward(sandwich.pre_feedforward_layernorm->forward(h))));
  EXPECT_TENSOR_NEAR(sandwich.forward(x, cos, sin), want, 1e-5, 1e-6);
}

TEST_F(NnTest, LlamaForwardIsCausal) {
  nn::LlamaForCausalLM model(micro_llama(), gen);
  Tensor a = from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  Tensor b = from_vector<int64_t>({1, 2, 3, 4, 5, 9, 7, 8}, {1, 8});  // differs at position 5
  Tensor la = model.forward(a), lb = model.forward(b);
  EXPECT_EQ(la.shape(), Shape({1, 8, 11}));
  EXPECT_TENSOR_NEAR(slice(la, 1, 0, 5), slice(lb, 1, 0, 5), 0, 1e-6);
  std::vector<float> pa = slice(la, 1, 5, 6).to_vector<float>(), pb = slice(lb, 1, 5, 6).to_vector<float>();
  EXPECT_NE(pa, pb) << "position 5 sees its own token";
  EXPECT_THROW(model.forward(from_vector<int64_t>(std::vector<int64_t>(9, 1), {1, 9})), Error)
      << "longer than max_position_embeddings";
  EXPECT_THROW(model.forward(zeros({1, 4})), Error) << "float ids";
}

TEST_F(NnTest, LlamaStateDictRoundTrip) {
  nn::LlamaForCausalLM a(micro_llama(), gen), b(micro_llama(), gen);
  Tensor ids = from_vector<int64_t>({1, 2, 3, 4}, {1, 4});
  EXPECT_FALSE(a.forward(ids).to_vector<float>() == b.forward(ids).to_vector<float>());
  b.load_state_dict(a.state_dict());
  EXPECT_TENSOR_EQ(b.forward(ids), a.forward(ids));
}

TEST_F(NnTest, LlamaTrainsOnARepeatedSequence) {
  nn::LlamaForCausalLM model(micro_llama(), gen);
  Tensor ids = from_vector<int64_t>({1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 8}, {2, 8});
  optim::AdamW opt(model.named_trainable_parameters(), {.lr = 1e-2});
  const double first = model.loss(ids, ids).item();
  for (int i = 0; i < 30; ++i) {
    opt.zero_grad();
    model.loss(ids, ids).backward();
    opt.step();
  }
  EXPECT_LT(model.loss(ids, ids).item(), first * 0.5);
}

TEST_F(NnTest, Gpt2NamesTiedHeadAndCount) {
  nn::GPT2LMHeadModel model(nn::GPT2Config::tiny(), gen);
  auto sd = model.state_dict();
  for (const char* k : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                        "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight",
                        "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.weight",
                        "transformer.h.0.ln_2.bias", "transformer.h.3.mlp.c_fc.weight", "transformer.h.3.mlp.c_proj.bias",
                        "transformer.ln_f.weight", "transformer.ln_f.bias", "lm_head.weight"})
    EXPECT_TRUE(sd.count(k)) << k;
  EXPECT_EQ(sd.size(), 2u + 4 * 12 + 2 + 1);
  EXPECT_TRUE(sd.at("lm_head.weight").same(sd.at("transformer.wte.weight"))) << "tied";
  auto names = names_of(model.named_parameters());
  EXPECT_EQ(std::count(names.begin(), names.end(), "lm_head.weight"), 0) << "listed once, as in PyTorch";
  EXPECT_EQ(sd.at("transformer.h.0.attn.c_attn.weight").shape(), Shape({384, 128})) << "Linear [out, in]";
  // wte 256*128 + wpe 128*128 + 4 * (ln 2*256 + c_attn 128*384+384 + c_proj 128*128+128
  //   + c_fc 128*512+512 + c_proj 512*128+128) + ln_f 256
  EXPECT_EQ(model.num_parameters(), 32768 + 16384 + 4 * (512 + 49536 + 16512 + 66048 + 65664) + 256);
  Tensor ids = from_vector<int64_t>({1, 2, 3, 200, 5, 6}, {2, 3});
  EXPECT_EQ(model.forward(ids).shape(), Shape({2, 3, 256}));
  const double first = model.loss(ids, ids).item();
  optim::AdamW opt(model.trainable_parameters(), {.lr = 1e-2});
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    model.loss(ids, ids).backward();
    opt.step();
  }
  EXPECT_LT(model.loss(ids, ids).item(), first);
  EXPECT_TRUE(model.lm_head->weight.same(model.transformer->wte->weight)) << "still tied after training";
}

// Full fine-tuning forward and backward of both model families on the GPU match the CPU.
TEST_F(NnTest, ModelsCudaMatchesCpu) {
  TG_REQUIRE_CUDA();
  nn::LlamaForCausalLM cpu(micro_llama(), gen), gpu(micro_llama(), gen);
  gpu.load_state_dict(cpu.state_dict());
  Tensor w = gpu.lm_head->weight;
  gpu.to(Device::cuda());
  EXPECT_TRUE(w.device().is_cuda()) << "handles held outside see the move";
  EXPECT_TRUE(gpu.model->rotary_emb->cos.device().is_cuda()) << "buffers move too";
  Tensor ids = from_vector<int64_t>({1, 4, 9, 2, 0, 3, 10, 5}, {2, 4});
  Tensor lc = cpu.loss(ids, ids), lg = gpu.loss(to(ids, Device::cuda()), to(ids, Device::cuda()));
  EXPECT_NEAR(lg.item(), lc.item(), 1e-5);
  lc.backward();
  lg.backward();
  for (auto& [n, p] : cpu.named_parameters()) {
    SCOPED_TRACE(n);
    EXPECT_TENSOR_NEAR(to(gpu.get_parameter(n).grad(), Device::cpu()), p.grad(), 1e-4, 1e-6);
  }
  nn::GPT2Config gc = nn::GPT2Config::tiny();
  gc.n_embd = 16;
  gc.n_head = 2;
  gc.n_layer = 2;
  nn::GPT2LMHeadModel g_cpu(gc, gen), g_gpu(gc, gen);
  g_gpu.load_state_dict(g_cpu.state_dict());
  g_gpu.to(Device::cuda());
  EXPECT_TRUE(g_gpu.lm_head->weight.same(g_gpu.transformer->wte->weight)) << "still tied";
  EXPECT_TENSOR_NEAR(to(g_gpu.forward(to(ids, Device::cuda())), Device::cpu()), g_cpu.forward(ids), 1e-4, 1e-5);
  EXPECT_EQ(causal_mask(3, 3, Device::cuda()).to_vector<bool>(), causal_mask(3, 3).to_vector<bool>());
}

}  // namespace
}  // namespace tg::test
