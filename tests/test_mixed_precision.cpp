// Mixed precision LoRA, as peft's default (autocast_adapter_dtype): a bfloat16 base, float32
// adapters, float32 gradients, AdamW state and loss. On the CPU here; the same on the GPU, and
// GPU against CPU, in the tests that TG_REQUIRE_CUDA.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "examples/common/data.h"
#include "nn/nn.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "testing/testing.h"

namespace tg::test {
namespace {

using nn::LlamaConfig;
using nn::LlamaForCausalLM;

LlamaConfig micro() {
  LlamaConfig c;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  c.initializer_range = 0.2;  // logits far from uniform, so a few LoRA steps visibly lower the loss
  return c;
}

// ||got - want|| / ||want||: gradients whose elements straddle zero have no useful elementwise
// relative error in bf16.
double relative_error(const Tensor& got, const Tensor& want) {
  std::vector<float> g = to(got, kFloat32).to_vector<float>(), w = to(want, kFloat32).to_vector<float>();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    diff += (g[i] - w[i]) * double(g[i] - w[i]);
    norm += w[i] * double(w[i]);
  }
  return std::sqrt(diff / norm);
}

const peft::LoraConfig kAllLinears{.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                      "down_proj"}};

// A model with LoRA on every Linear, B made non-zero (as training would), its base in `dtype`.
// The same seed gives the same weights whatever the dtype: the adapters are drawn in float32.
std::shared_ptr<LlamaForCausalLM> lora_model(DType dtype, uint64_t seed = 3) {
  Generator g(seed);
  auto m = std::make_shared<LlamaForCausalLM>(micro(), g);
  m->to(dtype);
  peft::apply_lora(*m, kAllLinears, g);
  for (auto& [path, l] : peft::lora_layers(*m)) nn::init::normal_(l->lora_B->weight, 0.0, 0.05, g);
  return m;
}

Tensor ids_for(Generator& gen, Device device = Device::cpu()) {
  return randint(0, micro().vocab_size, {3, 12}, gen, {.dtype = kInt64, .device = device});
}

// dtypes, requires_grad and gradients of a bf16-base LoRA model after one backward.
void expect_mixed_precision_grads(LlamaForCausalLM& m, const Tensor& ids) {
  m.zero_grad();
  Tensor loss = m.loss(ids, ids);
  EXPECT_EQ(loss.dtype(), kFloat32);
  EXPECT_TRUE(std::isfinite(loss.item()));
  loss.backward();
  for (auto& [name, p] : m.named_parameters()) {
    SCOPED_TRACE(name);
    const bool adapter = name.find(".lora_") != std::string::npos;
    EXPECT_EQ(p.dtype(), adapter ? kFloat32 : kBFloat16);
    EXPECT_EQ(p.requires_grad(), adapter);
    if (adapter) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().dtype(), kFloat32);
    } else {
      EXPECT_FALSE(p.grad().defined());
    }
  }
}

class MixedPrecisionTest : public testing::SeededTest {};

TEST_F(MixedPrecisionTest, Bf16BaseGetsFloat32AdaptersWithFloat32Grads) {
  auto m = lora_model(kBFloat16);
  expect_mixed_precision_grads(*m, ids_for(gen));
}

TEST_F(MixedPrecisionTest, AutocastOffGivesBf16AdaptersAndFloat64StaysFloat64) {
  LlamaForCausalLM m(micro(), gen);
  m.to(kBFloat16);
  peft::apply_lora(m, {.autocast_adapter_dtype = false}, gen);
  for (auto& [path, l] : peft::lora_layers(m)) EXPECT_EQ(l->lora_A->weight.dtype(), kBFloat16) << path;
  LlamaForCausalLM d(micro(), gen);
  d.to(kFloat64);
  peft::apply_lora(d, {}, gen);
  for (auto& [path, l] : peft::lora_layers(d)) EXPECT_EQ(l->lora_B->weight.dtype(), kFloat64) << path;
}

// The bf16 model computes the float32 model's loss and adapter gradients to bfloat16 accuracy.
TEST_F(MixedPrecisionTest, Bf16LossAndGradientsNearFloat32) {
  auto bf = lora_model(kBFloat16), f32 = lora_model(kFloat32);
  Tensor ids = ids_for(gen);
  Tensor lb = bf->loss(ids, ids), lf = f32->loss(ids, ids);
  EXPECT_NEAR(lb.item(), lf.item(), 2e-2 * lf.item());
  lb.backward();
  lf.backward();
  for (auto& [name, p] : f32->named_trainable_parameters())
    EXPECT_LT(relative_error(bf->get_parameter(name).grad(), p.grad()), 5e-2) << name;
}

// One LoRALinear: bf16 x and W, float32 A and B. The output and dx are bf16, dA and dB float32
// and close to those of the all-float32 layer on the same (bf16-representable) values.
TEST_F(MixedPrecisionTest, LoRALinearForwardAndGradientsMatchFloat32) {
  nn::Linear base16(24, 20, true, gen), base32(24, 20, true, gen);
  base16.to(kBFloat16);
  {
    NoGradGuard no_grad;  // the float32 layer holds the bf16 layer's values
    copy_(base32.weight, base16.weight);
    copy_(base32.bias, base16.bias);
  }
  Generator g1(5), g2(5);
  peft::LoRALinear l32(base32, 4, 8, 0.0, g1), l16(base16, 4, 8, 0.0, g2);
  nn::init::normal_(l32.lora_B->weight, 0.0, 0.1, g1);
  nn::init::normal_(l16.lora_B->weight, 0.0, 0.1, g2);
  EXPECT_EQ(l16.lora_A->weight.dtype(), kFloat32);
  EXPECT_TENSOR_EQ(l16.lora_B->weight, l32.lora_B->weight);

  Tensor x16 = to(randn({2, 5, 24}, gen), kBFloat16).requires_grad_(true);
  Tensor x32 = to(x16.detach(), kFloat32).requires_grad_(true);
  Tensor y16 = l16.forward(x16), y32 = l32.forward(x32);
  EXPECT_EQ(y16.dtype(), kBFloat16);
  EXPECT_TENSOR_NEAR(to(y16, kFloat32), y32, 1e-2, 1e-2);
  Tensor w = randn({2, 5, 20}, gen);
  sum(mul(to(y16, kFloat32), w)).backward();
  sum(mul(y32, w)).backward();
  EXPECT_EQ(x16.grad().dtype(), kBFloat16);
  EXPECT_TENSOR_NEAR(to(x16.grad(), kFloat32), x32.grad(), 1e-2, 1e-2);
  for (auto [a, b] : {std::pair{l16.lora_A, l32.lora_A}, std::pair{l16.lora_B, l32.lora_B}}) {
    EXPECT_EQ(a->weight.grad().dtype(), kFloat32);
    // Only y's rounding to bf16 and the bf16 x differ; the GEMMs ran in float32.
    EXPECT_LT(relative_error(a->weight.grad(), b->weight.grad()), 1e-2);
  }
}

// bf16 logits: the loss is the float32 cross entropy of the float32 logits; dlogits are bf16.
TEST_F(MixedPrecisionTest, CausalLmLossOfBf16LogitsIsFloat32) {
  Tensor logits = to(randn({2, 6, 11}, gen), kBFloat16).requires_grad_(true);
  Tensor labels = randint(0, 11, {2, 6}, gen, {.dtype = kInt64});
  Tensor loss = nn::causal_lm_loss(logits, labels);
  EXPECT_EQ(loss.dtype(), kFloat32);
  Tensor want = cross_entropy(reshape(slice(to(logits.detach(), kFloat32), 1, 0, 5), {-1, 11}),
                              reshape(slice(labels, 1, 1, 6), {-1}));
  EXPECT_EQ(loss.item(), want.item());
  loss.backward();
  EXPECT_EQ(logits.grad().dtype(), kBFloat16);
}

void expect_training_lowers_loss(Device device) {
  auto m = lora_model(kBFloat16);
  m->to(device);
  Generator g(11);
  Tensor ids = ids_for(g, device);
  optim::AdamW opt(m->named_trainable_parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    opt.zero_grad();
    Tensor loss = m->loss(ids, ids);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  for (auto& [name, p] : m->named_trainable_parameters()) EXPECT_EQ(p.dtype(), kFloat32) << name;
  for (auto& [key, t] : opt.state_dict())
    if (is_floating_point(t.dtype()) && t.numel() > 1) EXPECT_EQ(t.dtype(), kFloat32) << key;
  EXPECT_LT(last, first - 0.1) << "first " << first << ", last " << last;
}

TEST_F(MixedPrecisionTest, AdamWStepsLowerTheLoss) { expect_training_lowers_loss(Device::cpu()); }

// merge adds the float32 delta to the bf16 weight in float32 and rounds once. Then the
// forward is the unmerged one to bf16 accuracy: single logits of this 2-layer model move by a
// few bf16 steps, so the bound is on the relative norm of the difference.
void expect_merge_matches_unmerged(Device device) {
  auto m = lora_model(kBFloat16);
  m->to(device);
  Generator g(13);
  Tensor ids = ids_for(g, device);
  NoGradGuard no_grad;
  Tensor unmerged = m->forward(ids);
  auto& q = *peft::lora_layers(*m).front().second;
  Tensor want_w = to(add(to(q.weight, kFloat32), q.delta_weight()), kBFloat16);
  peft::merge(*m);
  EXPECT_EQ(q.weight.dtype(), kBFloat16);
  EXPECT_TENSOR_EQ(q.weight, want_w);
  EXPECT_LT(relative_error(m->forward(ids), unmerged), 2e-2);
  peft::unmerge(*m);
  EXPECT_LT(relative_error(m->forward(ids), unmerged), 2e-2);
  peft::merge_and_unload(*m);
  EXPECT_LT(relative_error(m->forward(ids), unmerged), 2e-2);
}

TEST_F(MixedPrecisionTest, MergeWithBf16BaseMatchesUnmerged) { expect_merge_matches_unmerged(Device::cpu()); }

TEST_F(MixedPrecisionTest, CudaBf16BaseGetsFloat32AdaptersWithFloat32Grads) {
  TG_REQUIRE_CUDA();
  auto m = lora_model(kBFloat16);
  m->to(Device::cuda());
  expect_mixed_precision_grads(*m, ids_for(gen, Device::cuda()));
}

TEST_F(MixedPrecisionTest, CudaAdamWStepsLowerTheLoss) {
  TG_REQUIRE_CUDA();
  expect_training_lowers_loss(Device::cuda());
}

TEST_F(MixedPrecisionTest, CudaMergeWithBf16BaseMatchesUnmerged) {
  TG_REQUIRE_CUDA();
  expect_merge_matches_unmerged(Device::cuda());
}

// The same bf16-base LoRA step on the GPU and the CPU: the losses agree to bfloat16 accuracy,
// and the GPU's float32 adapter gradients are as near the all-float32 CPU model's as the CPU's
// bf16 ones are (Bf16LossAndGradientsNearFloat32: at most 3.5e-2 here; the backends round bf16
// activations at different points, so the bound is a little wider).
TEST_F(MixedPrecisionTest, CudaBf16LoraStepMatchesCpu) {
  TG_REQUIRE_CUDA();
  auto cpu = lora_model(kBFloat16), gpu = lora_model(kBFloat16), f32 = lora_model(kFloat32);
  gpu->to(Device::cuda());
  Tensor ids = ids_for(gen), idg = to(ids, Device::cuda());
  Tensor lc = cpu->loss(ids, ids), lg = gpu->loss(idg, idg), lf = f32->loss(ids, ids);
  EXPECT_NEAR(lg.item(), lc.item(), 2e-2 * lc.item());
  lg.backward();
  lf.backward();
  for (auto& [name, p] : f32->named_trainable_parameters()) {
    SCOPED_TRACE(name);
    Tensor gg = to(gpu->get_parameter(name).grad(), Device::cpu());
    EXPECT_EQ(gg.dtype(), kFloat32);
    EXPECT_LT(relative_error(gg, p.grad()), 6e-2);
  }
}

// peft's mixed precision trains as float32 does: 50 LoRA steps of bench-135m (bf16 base, float32
// adapters) against the same steps of the all-float32 model (TF32 off) holding the same
// (bf16-representable) base weights, byte-level prose as data, every step's loss within 1%. The
// losses must also fall, so the trajectories are compared while the adapters move. lr 1e-3
// (train_step_bench's): at 2e-3 the loss leaves its unigram plateau near step 40 and the two runs
// leave it a step apart (within 0.04% until step 39, 2.7% apart at step 48 on the H200).
TEST_F(MixedPrecisionTest, CudaBench135mBf16LoraTracksFloat32Over50Steps) {
  TG_REQUIRE_CUDA();
  const nn::LlamaConfig c = nn::LlamaConfig::bench_135m();
  const examples::ByteDataset data(examples::generate_corpus("stories", 1, 1 << 20));
  auto losses = [&](DType dtype) {
    Generator g(0);
    auto m = std::make_shared<LlamaForCausalLM>(c, g);
    m->to(kBFloat16);
    m->to(dtype);
    peft::apply_lora(*m, {}, g);
    m->to(Device::cuda());
    optim::AdamW opt(m->named_trainable_parameters(), {.lr = 1e-3, .weight_decay = 0.01});
    Generator batches(7);
    std::vector<double> out;
    for (int step = 0; step < 50; ++step) {
      Tensor ids = data.batch(true, 4, 512, batches, Device::cuda());
      opt.zero_grad();
      Tensor loss = m->loss(ids, ids);
      loss.backward();
      opt.step();
      out.push_back(loss.item());
    }
    return out;
  };
  const std::vector<double> f32 = losses(kFloat32), bf16 = losses(kBFloat16);
  std::string both;
  for (size_t i = 0; i < f32.size(); ++i) both += std::to_string(f32[i]) + "/" + std::to_string(bf16[i]) + " ";
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_NEAR(bf16[i], f32[i], 0.01 * f32[i]) << "step " << i << "; float32/bf16: " << both;
  EXPECT_LT(f32.back(), 0.8 * f32.front()) << "first " << f32.front() << ", last " << f32.back();
}

}  // namespace
}  // namespace tg::test
