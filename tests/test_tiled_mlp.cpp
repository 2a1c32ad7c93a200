// The tiled gated MLP (nn/mlp.h: GatedMLP::chunk_tokens, nn::tile_mlps): outputs and gradients as
// the untiled within float tolerance, LoRA on gate/up/down included, unfused and fused (Phi-3),
// SwiGLU and GeGLU, alone and in a checkpointed Llama; its [tokens, intermediate] activations exist
// for one chunk at a time.
#include <gtest/gtest.h>

#include "core/memory.h"
#include "nn/init.h"
#include "nn/mlp.h"
#include "nn/models/gpt2.h"
#include "nn/models/llama.h"
#include "peft/lora.h"
#include "tapegrad.h"
#include "test_support.h"
#include "testing/testing.h"

namespace tg {
namespace {

class TiledMlp : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda() && !testing::cuda_ready())
      GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  }
  Device dev() const { return GetParam(); }
};

// LoRA on every projection, B drawn non-zero so that A takes a gradient.
void add_lora(nn::Module& model, const std::vector<std::string>& targets, Generator& gen) {
  peft::apply_lora(model, {.r = 4, .target_modules = targets}, gen);
  for (auto& [path, l] : peft::lora_layers(model)) nn::init::normal_(l->lora_B->weight, 0.0, 0.05, gen);
}

struct Result {
  Tensor out, dx;
  nn::NamedTensors grads;
};

Result run(nn::GatedMLP& mlp, const Tensor& x0, const Tensor& seed, int64_t chunk) {
  mlp.chunk_tokens = chunk;
  mlp.zero_grad();
  Tensor x = x0.detach().requires_grad_(true);
  Result r;
  r.out = mlp.forward(x);
  sum(mul(r.out, seed)).backward();
  r.dx = x.grad();
  for (auto& [name, p] : mlp.named_trainable_parameters()) r.grads.emplace_back(name, p.grad());
  return r;
}

void expect_close(const Result& got, const Result& want) {
  auto cpu = [](const Tensor& t) { return to(t, Device::cpu()); };
  EXPECT_TENSOR_NEAR(cpu(got.out), cpu(want.out), 1e-5, 1e-5);
  EXPECT_TENSOR_NEAR(cpu(got.dx), cpu(want.dx), 1e-5, 1e-5);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  ASSERT_GT(want.grads.size(), 0u);
  for (size_t i = 0; i < got.grads.size(); ++i) {
    SCOPED_TRACE(got.grads[i].first);
    ASSERT_TRUE(got.grads[i].second.defined() && want.grads[i].second.defined());
    EXPECT_TENSOR_NEAR(cpu(got.grads[i].second), cpu(want.grads[i].second), 1e-5, 1e-5);
  }
}

TEST_P(TiledMlp, LoraMlpsEqualTheUntiled) {
  using Act = nn::GatedMLPOptions::Activation;
  for (const nn::GatedMLPOptions& o : {nn::GatedMLPOptions{}, nn::GatedMLPOptions{.activation = Act::GELUTanh, .bias = true},
                                       nn::GatedMLPOptions{.fused = true}}) {
    SCOPED_TRACE(::testing::Message() << "gelu " << (o.activation == Act::GELUTanh) << " fused " << o.fused);
    Generator gen(31);
    nn::GatedMLP mlp(16, 40, o, gen);
    add_lora(mlp, o.fused ? std::vector<std::string>{"gate_up_proj", "down_proj"}
                          : std::vector<std::string>{"gate_proj", "up_proj", "down_proj"}, gen);
    mlp.to(dev());
    const Tensor x = to(randn({3, 7, 16}, gen), dev()), seed = to(randn({3, 7, 16}, gen), dev());
    const Result whole = run(mlp, x, seed, 0);
    for (int64_t chunk : {5, 7, 20}) {  // an uneven last chunk, rows that split batches, two chunks
      SCOPED_TRACE(chunk);
      expect_close(run(mlp, x, seed, chunk), whole);
    }
    EXPECT_TENSOR_EQ(to(run(mlp, x, seed, 21).out, Device::cpu()), to(whole.out, Device::cpu()))
        << "a chunk as long as the input is the untiled MLP";
  }
}

// The peak of a forward + backward: the [tokens, intermediate] activations of one chunk, not all.
TEST_P(TiledMlp, HoldsOneChunksIntermediatesAtATime) {
  Generator gen(32);
  nn::GatedMLP mlp(16, 512, {}, gen);
  add_lora(mlp, {"gate_proj", "up_proj", "down_proj"}, gen);
  mlp.to(dev());
  const Tensor x = to(randn({1, 256, 16}, gen), dev()), seed = to(randn({1, 256, 16}, gen), dev());
  auto peak = [&](int64_t chunk) {
    run(mlp, x, seed, chunk);  // the first run's workspaces and gradients
    synchronize(dev());
    reset_peak_memory_stats(dev());
    const size_t before = memory_stats(dev()).bytes_in_use;
    run(mlp, x, seed, chunk);
    synchronize(dev());
    return memory_stats(dev()).peak_bytes - before;
  };
  const size_t whole = peak(0), tiled = peak(32);
  EXPECT_GT(whole, size_t{3} * 256 * 512 * 4) << "the untiled MLP keeps gate, up and their product";
  EXPECT_LT(tiled * 3, whole) << "tiled " << tiled << " B, untiled " << whole << " B";
}

TEST_P(TiledMlp, CheckpointedLlamaLoraEqualsTheUntiled) {
  Generator gen(33);
  nn::LlamaConfig c;
  c.vocab_size = 37, c.hidden_size = 32, c.intermediate_size = 48, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.max_position_embeddings = 32;
  nn::LlamaForCausalLM model(c, gen);
  add_lora(model, {"q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"}, gen);
  model.to(dev());
  model.gradient_checkpointing_enable();
  const Tensor ids = to(randint(0, 37, {2, 24}, gen, {.dtype = kInt64}), dev());
  auto step = [&](int64_t chunk) {
    nn::tile_mlps(model, chunk);
    model.zero_grad();
    Tensor loss = model.loss(ids, ids);
    loss.backward();
    nn::NamedTensors grads = {{"loss", loss.detach()}};
    for (auto& [name, p] : model.named_trainable_parameters()) grads.emplace_back(name, to(p.grad(), Device::cpu()));
    return grads;
  };
  const nn::NamedTensors whole = step(0), tiled = step(10);
  ASSERT_EQ(whole.size(), tiled.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    SCOPED_TRACE(whole[i].first);
    EXPECT_TENSOR_NEAR(to(tiled[i].second, Device::cpu()), to(whole[i].second, Device::cpu()), 1e-5, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, TiledMlp, ::testing::Values(Device::cpu(), Device::cuda()),
                         [](const auto& info) { return info.param.is_cuda() ? std::string("Cuda") : std::string("Cpu"); });

TEST(TiledMlpErrors, NamedByTileMlps) {
  Generator gen(34);
  nn::GPT2Config c;
  c.vocab_size = 37, c.n_positions = 16, c.n_embd = 32, c.n_layer = 1, c.n_head = 4;
  nn::GPT2LMHeadModel gpt2(c, gen);
  EXPECT_ERROR_HAS(nn::tile_mlps(gpt2, 64), "tile_mlps", "no gated MLP");
  nn::GatedMLP mlp(8, 16, {}, gen);
  EXPECT_ERROR_HAS(nn::tile_mlps(mlp, -1), "tile_mlps", "chunk_tokens must be >= 0", "-1");
}

}  // namespace
}  // namespace tg
