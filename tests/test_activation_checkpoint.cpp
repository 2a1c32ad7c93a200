// Activation checkpointing (core/activation_checkpoint.h, Module::gradient_checkpointing_enable):
// the loss, every gradient and the generators' streams bitwise as without, dropout included;
// less memory held for backward; backward(inputs=), retain_graph and the errors; the same with the
// checkpointed inputs offloaded to host memory (core/activation_offload.h).
#include <gtest/gtest.h>

#include <functional>

#include "core/activation_checkpoint.h"
#include "core/activation_offload.h"
#include "core/memory.h"
#include "nn/init.h"
#include "nn/models/gpt2.h"
#include "nn/models/llama.h"
#include "peft/lora.h"
#include "tapegrad.h"
#include "test_support.h"
#include "testing/testing.h"

namespace tg {
namespace {

nn::LlamaConfig llama_gqa(int64_t layers = 2, int64_t positions = 16) {
  nn::LlamaConfig c;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = positions;
  return c;
}

nn::GPT2Config gpt2_dropout() {
  nn::GPT2Config c;
  c.vocab_size = 37;
  c.n_positions = 16;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.1;
  return c;
}

// LoRA on `targets` with dropout, B drawn non-zero (as after some training) so A gets a gradient.
void add_lora(nn::Module& model, const std::vector<std::string>& targets, Generator& gen) {
  peft::apply_lora(model, {.lora_dropout = 0.1, .target_modules = targets}, gen);
  for (auto& [path, l] : peft::lora_layers(model)) nn::init::normal_(l->lora_B->weight, 0.0, 0.05, gen);
}

// One forward + backward with the default generator (the one dropout layers draw from) rewound to
// the same state: the loss, every trainable parameter's gradient, where the generator ended and how
// many checkpoint nodes the graph had.
struct Step {
  Tensor loss;
  nn::NamedTensors grads;
  uint64_t offset_after = 0;
  int checkpoints = 0;
};

Step run_step(nn::Module& model, const std::function<Tensor()>& loss_fn, bool checkpointing,
              const std::vector<Tensor>& inputs = {}, const nn::GradientCheckpointingKwargs& kwargs = {}) {
  Generator& gen = default_generator();
  if (checkpointing) model.gradient_checkpointing_enable(kwargs);
  else model.gradient_checkpointing_disable();
  model.zero_grad();
  gen.set_state(99, 5);
  Step s;
  Tensor loss = loss_fn();
  for (const auto& p : backward_plan({loss}, inputs)) s.checkpoints += p.node == "checkpoint";
  backward({loss}, {}, false, inputs);
  s.loss = loss.detach();
  s.offset_after = gen.offset();
  for (auto& [name, p] : model.named_trainable_parameters()) s.grads.emplace_back(name, p.grad());
  return s;
}

void expect_bitwise(const Step& got, const Step& want) {
  EXPECT_TENSOR_EQ(got.loss, want.loss);
  EXPECT_EQ(got.offset_after, want.offset_after) << "the generator's stream moved differently";
  ASSERT_EQ(got.grads.size(), want.grads.size());
  int with_grad = 0;
  for (size_t i = 0; i < got.grads.size(); ++i) {
    SCOPED_TRACE(got.grads[i].first);
    ASSERT_EQ(got.grads[i].second.defined(), want.grads[i].second.defined());
    if (!want.grads[i].second.defined()) continue;
    ++with_grad;
    EXPECT_TENSOR_EQ(got.grads[i].second, want.grads[i].second);
  }
  EXPECT_GT(with_grad, 0) << "no gradient was compared";
}

// Runs the step without and with checkpointing and compares them bit for bit.
void expect_checkpointing_changes_nothing(nn::Module& model, const std::function<Tensor()>& loss_fn,
                                          int layers, bool draws) {
  const Step plain = run_step(model, loss_fn, false), ckpt = run_step(model, loss_fn, true);
  EXPECT_EQ(plain.checkpoints, 0);
  EXPECT_EQ(ckpt.checkpoints, layers) << "one checkpoint node per decoder layer";
  if (draws) EXPECT_GT(plain.offset_after, 5u) << "dropout drew no mask: the test would not test it";
  expect_bitwise(ckpt, plain);
}

// Plain and offloaded checkpointing give the same bits; every layer's input was in host memory at
// once (the peak) and none is left after backward.
void expect_offload_changes_nothing(nn::Module& model, const std::function<Tensor()>& loss_fn, int64_t layer_bytes,
                                    int layers, const std::vector<Tensor>& inputs = {}) {
  const Step plain = run_step(model, loss_fn, true, inputs);
  const size_t before = offload_memory_stats().bytes_in_use;
  reset_offload_peak_memory_stats();
  const Step offloaded = run_step(model, loss_fn, true, inputs, {.offload_activations = true});
  EXPECT_EQ(offloaded.checkpoints, layers);
  expect_bitwise(offloaded, plain);
  EXPECT_EQ(offload_memory_stats().peak_bytes - before, static_cast<size_t>(layers * layer_bytes))
      << "each layer's input in host memory until backward";
  EXPECT_EQ(offload_memory_stats().bytes_in_use, before) << "backward gave the host memory back";
}

class CheckpointModels : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda() && !testing::cuda_ready())
      GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  }
  Device dev() const { return GetParam(); }
  Tensor ids(int64_t vocab, int64_t B = 3, int64_t T = 12) {
    Generator g(11);
    return randint(0, vocab, {B, T}, g, {.dtype = kInt64, .device = dev()});
  }
  // Bytes a checkpointed LoRA Llama of `layers` holds on the device after its forward.
  int64_t held_after_forward(int64_t layers, const nn::GradientCheckpointingKwargs& kwargs) {
    Generator gen(8);
    nn::LlamaForCausalLM model(llama_gqa(layers), gen);
    add_lora(model, {"q_proj", "v_proj"}, gen);
    model.to(dev());
    model.gradient_checkpointing_enable(kwargs);
    const Tensor x = ids(37);
    const size_t before = memory_stats(dev()).bytes_in_use;
    const Tensor hidden = model.model->forward(x);
    return static_cast<int64_t>(memory_stats(dev()).bytes_in_use - before);
  }
};

// A loss whose graph backward runs through twice: once here (retain_graph), once in the step.
std::function<Tensor()> backward_twice(nn::CausalLM& model, const Tensor& x) {
  return [&model, x] {
    Tensor loss = model.loss(x, x);
    loss.backward({}, true);
    return loss;
  };
}

// The GPU's embedding backward adds with atomics (not bitwise run to run): full fine-tuning
// compares on the CPU only, LoRA (embeddings frozen) on both.
// An op that picks its kernel by whether it records (attention: cuDNN's or the flash kernels) is
// told in the first, unrecorded run that backward will run it again with recording.
TEST(Checkpoint, TheFirstRunKnowsItIsRecordedAtBackward) {
  std::vector<bool> seen;
  Tensor x = randn({3}).requires_grad_();
  auto out = checkpoint([&](const std::vector<Tensor>& in) {
    seen.push_back(in_checkpoint_first_pass());
    return std::vector<Tensor>{mul(in[0], in[0])};
  }, {x});
  EXPECT_FALSE(in_checkpoint_first_pass());
  sum(out[0]).backward();
  EXPECT_EQ(seen, (std::vector<bool>{true, false}));  // the first run, then the recomputation
  NoGradGuard g;
  EXPECT_FALSE(in_checkpoint_first_pass()) << "a plain no-grad scope is not a checkpoint";
}

TEST(Checkpoint, FullLlamaGqaGradientsAreBitwiseThoseWithout) {
  Generator gen(1);
  nn::LlamaForCausalLM model(llama_gqa(), gen);
  Tensor ids = randint(0, 37, {3, 12}, gen, {.dtype = kInt64});
  expect_checkpointing_changes_nothing(model, [&] { return model.loss(ids, ids); }, 2, false);
}

TEST(Checkpoint, FullGpt2WithDropoutGradientsAreBitwiseThoseWithout) {
  Generator gen(2);
  nn::GPT2LMHeadModel model(gpt2_dropout(), gen);
  Tensor ids = randint(0, 37, {3, 12}, gen, {.dtype = kInt64});
  expect_checkpointing_changes_nothing(model, [&] { return model.loss(ids, ids); }, 2, true);
}

TEST_P(CheckpointModels, LlamaLoraWithDropoutIsBitwiseAsWithout) {
  Generator gen(3);
  nn::LlamaForCausalLM model(llama_gqa(), gen);
  add_lora(model, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, gen);
  model.to(dev());
  Tensor x = ids(37);
  expect_checkpointing_changes_nothing(model, [&] { return model.loss(x, x); }, 2, true);
}

// The benchmark's case: a bfloat16 base with float32 adapters.
TEST_P(CheckpointModels, Bf16LlamaLoraIsBitwiseAsWithout) {
  Generator gen(4);
  nn::LlamaForCausalLM model(llama_gqa(), gen);
  model.to(kBFloat16);
  add_lora(model, {"q_proj", "k_proj", "v_proj", "o_proj"}, gen);
  model.to(dev());
  Tensor x = ids(37);
  expect_checkpointing_changes_nothing(model, [&] { return model.loss(x, x); }, 2, true);
}

TEST_P(CheckpointModels, Gpt2LoraWithDropoutIsBitwiseAsWithout) {
  Generator gen(5);
  nn::GPT2LMHeadModel model(gpt2_dropout(), gen);
  add_lora(model, {"c_attn", "c_proj"}, gen);
  model.to(dev());
  Tensor x = ids(37);
  expect_checkpointing_changes_nothing(model, [&] { return model.loss(x, x); }, 2, true);
  expect_offload_changes_nothing(model, [&] { return model.loss(x, x); }, 3 * 12 * 32 * 4, 2);
}

TEST_P(CheckpointModels, BackwardWithInputsGivesTheSameGradientsAndOnlyThose) {
  Generator gen(6);
  nn::LlamaForCausalLM model(llama_gqa(), gen);
  add_lora(model, {"q_proj", "v_proj"}, gen);
  model.to(dev());
  Tensor x = ids(37);
  // Only layer 0's q_proj.lora_A: layer 1's checkpoint wants its input's gradient, none of its
  // parameters'.
  Tensor a = model.get_parameter("model.layers.0.self_attn.q_proj.lora_A.weight");
  auto loss_fn = [&] { return model.loss(x, x); };
  const Step plain = run_step(model, loss_fn, false, {a}), ckpt = run_step(model, loss_fn, true, {a});
  expect_bitwise(ckpt, plain);
  for (auto& [name, g] : ckpt.grads) EXPECT_EQ(g.defined(), name == "model.layers.0.self_attn.q_proj.lora_A.weight") << name;
  std::vector<GradMask> masks;
  for (const auto& p : backward_plan({model.loss(x, x)}, {a}))
    if (p.node == "checkpoint") masks.push_back(p.mask);
  ASSERT_EQ(masks.size(), 2u);
  EXPECT_TRUE(masks[0][0]) << "layer 1's input: layer 0's h + m";
  EXPECT_EQ(std::count(masks[0].begin() + 1, masks[0].end(), true), 0) << "no parameter of layer 1";
  EXPECT_FALSE(masks[1][0]) << "layer 0's input comes from the frozen embedding";
  EXPECT_EQ(std::count(masks[1].begin(), masks[1].end(), true), 1) << "only the one lora_A of layer 0";
}

// What that relies on: fused_add_rms_norm(-0, x) sums to x bit for bit (signed zeros, the largest
// values, subnormals) and normalises as rms_norm(x) does, in float32 and bfloat16.
TEST_P(CheckpointModels, FusedAddOfMinusZeroIsTheIdentity) {
  const Tensor x32 = from_vector<float>({0.0f, -0.0f, 1.5f, -2.25f, 1e-40f, -3e38f, 7.0f, -0.0f}, {2, 4});
  const Tensor w = from_vector<float>({1.0f, 0.5f, -2.0f, 3.0f}, {4});
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = to(to(x32, dt), dev()), wt = to(to(w, dt), dev());
    auto [y, r] = fused_add_rms_norm(full(x.shape(), -0.0, x.options()), x, wt);
    EXPECT_TENSOR_EQ(to(r, Device::cpu()), to(x, Device::cpu()));
    EXPECT_TENSOR_EQ(to(y, Device::cpu()), to(rms_norm(x, wt), Device::cpu()));
  }
}

// A checkpointed Llama keeps one [B, T, d] tensor a decoder layer between forward and backward
// (h + m), not two: four layers hold two tensors more than two layers do.
TEST_P(CheckpointModels, LlamaKeepsOneTensorALayer) {
  held_after_forward(2, {});  // a first forward may allocate what later ones reuse (a library's workspace)
  EXPECT_EQ(held_after_forward(4, {}) - held_after_forward(2, {}), 2 * 3 * 12 * 32 * 4)
      << "two layers' h + m: 2 x B 3 x T 12 x d 32 floats";
}

TEST_P(CheckpointModels, RetainGraphRecomputesTheSameDropoutTwice) {
  Generator gen(7);
  nn::GPT2LMHeadModel model(gpt2_dropout(), gen);
  add_lora(model, {"c_attn"}, gen);
  model.to(dev());
  expect_checkpointing_changes_nothing(model, backward_twice(model, ids(37)), 2, true);
}

TEST_P(CheckpointModels, CheckpointingHoldsLessForBackward) {
  // Activations dominate: 8 layers of [4, 64] tokens against a small model (each checkpoint
  // keeps its layer's two inputs, the residual h and the last MLP output m, LlamaModel's
  // fused-add form).
  Generator gen(8);
  nn::LlamaForCausalLM model(llama_gqa(8, 64), gen);
  add_lora(model, {"q_proj", "v_proj"}, gen);
  model.to(dev());
  Tensor x = ids(37, 4, 64);
  auto measure = [&](bool checkpointing) {
    if (checkpointing) model.gradient_checkpointing_enable();
    else model.gradient_checkpointing_disable();
    model.zero_grad();
    synchronize(dev());
    reset_peak_memory_stats(dev());
    const size_t before = memory_stats(dev()).bytes_in_use;
    Tensor loss = model.loss(x, x);
    size_t saved = 0;
    for (const auto& p : backward_plan({loss})) saved += p.saved_bytes;
    loss.backward();
    synchronize(dev());
    return std::pair<size_t, size_t>{memory_stats(dev()).peak_bytes - before, saved};
  };
  const auto [plain_peak, plain_saved] = measure(false);
  const auto [ckpt_peak, ckpt_saved] = measure(true);
  EXPECT_LT(ckpt_saved * 4, plain_saved) << "saved for backward: " << ckpt_saved << " B with, " << plain_saved << " B without";
  EXPECT_LT(ckpt_peak * 2, plain_peak) << "peak: " << ckpt_peak << " B with, " << plain_peak << " B without";
}

// ---- offloaded checkpoints ----

TEST_P(CheckpointModels, OffloadedLlamaLoraIsBitwiseAsPlainCheckpointing) {
  for (DType dt : {kFloat32, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Generator gen(20);
    nn::LlamaForCausalLM model(llama_gqa(4), gen);
    model.to(dt);
    add_lora(model, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, gen);
    model.to(dev());
    Tensor x = ids(37);
    expect_offload_changes_nothing(model, [&] { return model.loss(x, x); }, 3 * 12 * 32 * element_size(dt), 4);
  }
}

TEST_P(CheckpointModels, OffloadedBackwardWithInputsIsBitwiseAsPlainCheckpointing) {
  Generator gen(22);
  nn::LlamaForCausalLM model(llama_gqa(3), gen);
  add_lora(model, {"q_proj", "v_proj"}, gen);
  model.to(dev());
  Tensor x = ids(37);
  Tensor a = model.get_parameter("model.layers.1.self_attn.q_proj.lora_A.weight");
  expect_offload_changes_nothing(model, [&] { return model.loss(x, x); }, 3 * 12 * 32 * 4, 3, {a});
}

// On the GPU the offloaded inputs leave the device: four layers hold no more after forward than two
// (the last input stays until backward, as nothing is offloaded after it). On the CPU the host copy
// is the memory.
TEST_P(CheckpointModels, OffloadedLlamaHoldsNoTensorALayerOnTheGpu) {
  const nn::GradientCheckpointingKwargs offload{.offload_activations = true};
  held_after_forward(2, offload);
  EXPECT_EQ(held_after_forward(4, offload) - held_after_forward(2, offload), dev().is_cuda() ? 0 : 2 * 3 * 12 * 32 * 4);
}

TEST_P(CheckpointModels, OffloadedRetainGraphRecomputesTwice) {
  Generator gen(23);
  nn::GPT2LMHeadModel model(gpt2_dropout(), gen);
  add_lora(model, {"c_attn"}, gen);
  model.to(dev());
  expect_offload_changes_nothing(model, backward_twice(model, ids(37)), 3 * 12 * 32 * 4, 2);
}

INSTANTIATE_TEST_SUITE_P(Devices, CheckpointModels, ::testing::Values(Device::cpu(), Device::cuda()),
                         [](const auto& info) { return info.param.is_cuda() ? std::string("Cuda") : std::string("Cpu"); });

// ---- the function itself ----

// y = tanh(x W^T + b) * x, summed: inputs and parameters both take gradients.
Tensor block(const Tensor& x, const Tensor& w, const Tensor& b) { return mul(tanh(linear(x, w, b)), x); }

TEST(Checkpoint, FindsTheParametersTheFunctionUses) {
  Generator gen(9);
  Tensor w = randn({6, 6}, gen, {.requires_grad = true}), b = randn({6}, gen, {.requires_grad = true});
  Tensor x0 = randn({4, 6}, gen, {.requires_grad = true});
  sum(block(mul(x0, 2.0), w, b)).backward();
  const Tensor dw = w.grad(), db = b.grad(), dx = x0.grad();
  w.set_grad({}), b.set_grad({}), x0.set_grad({});

  Tensor x = mul(x0, 2.0);  // an input with history
  auto out = checkpoint([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block(in[0], w, b)}; }, {x});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].grad_fn());
  EXPECT_EQ(out[0].grad_fn()->input_names(), (std::vector<std::string>{"input0", "param0", "param1"}));
  EXPECT_EQ(out[0].grad_fn()->saved_bytes(), x.nbytes() + w.nbytes() + b.nbytes()) << "no activation kept";
  sum(out[0]).backward();
  EXPECT_TENSOR_EQ(w.grad(), dw);
  EXPECT_TENSOR_EQ(b.grad(), db);
  EXPECT_TENSOR_EQ(x0.grad(), dx);
}

TEST(Checkpoint, ParametersGetGradientsWhenNoInputRequiresGrad) {
  Generator gen(10);
  Tensor w = randn({6, 6}, gen, {.requires_grad = true}), b = randn({6}, gen);
  Tensor x = randn({4, 6}, gen);  // from a frozen embedding: LoRA's first layer
  auto out = checkpoint([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block(in[0], w, b)}; }, {x});
  ASSERT_TRUE(out[0].requires_grad());
  sum(out[0]).backward();
  Tensor want = w.grad();
  w.set_grad({});
  sum(block(x, w, b)).backward();
  EXPECT_TENSOR_EQ(want, w.grad());
}

TEST(Checkpoint, NestedCheckpointsWithDropoutAreBitwiseAsWithout) {
  Generator gen(12), drop(13);
  Tensor w = randn({6, 6}, gen, {.requires_grad = true});
  Tensor x = randn({4, 6}, gen, {.requires_grad = true});
  auto inner = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{dropout(linear(in[0], w), 0.3, true, drop)}; };
  auto outer = [&](const std::vector<Tensor>& in) {
    Tensor h = checkpoint(inner, {tanh(in[0])})[0];
    return std::vector<Tensor>{dropout(mul(h, in[0]), 0.2, true, drop)};
  };
  drop.set_state(3, 0);
  sum(outer({x})[0]).backward();
  const Tensor dw = w.grad(), dx = x.grad();
  const uint64_t end = drop.offset();
  w.set_grad({}), x.set_grad({});
  drop.set_state(3, 0);
  Tensor y = checkpoint(outer, {x})[0];
  drop.reserve(1000);  // draws between forward and backward must not change the recomputation
  sum(y).backward();
  EXPECT_TENSOR_EQ(w.grad(), dw);
  EXPECT_TENSOR_EQ(x.grad(), dx);
  EXPECT_EQ(drop.offset(), end + 1000) << "the recomputation moved the stream";
}

TEST(Checkpoint, WithoutGradModeTheFunctionJustRuns) {
  Generator gen(14);
  nn::LlamaForCausalLM model(llama_gqa(), gen);
  model.gradient_checkpointing_enable();
  EXPECT_TRUE(model.model->is_gradient_checkpointing());
  Tensor ids = randint(0, 37, {2, 8}, gen, {.dtype = kInt64});
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(model.forward(ids).requires_grad());
  }
  model.eval();  // transformers checkpoints only while training
  for (const auto& p : backward_plan({model.loss(ids, ids)})) EXPECT_NE(p.node, "checkpoint");
}

TEST(Checkpoint, Errors) {
  Generator gen(15);
  Tensor w = randn({6, 6}, gen, {.requires_grad = true});
  Tensor x = mul(randn({4, 6}, gen, {.requires_grad = true}), 1.0);
  Tensor w2 = mul(w, 2.0);  // requires grad, has a history outside the function
  EXPECT_ERROR_HAS(checkpoint([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{linear(in[0], w2)}; }, {x}),
                   "checkpoint", "has a history outside it", "pass it as an input");
  EXPECT_ERROR_HAS(checkpoint(nullptr, {x}), "checkpoint", "empty function");
  EXPECT_ERROR_HAS(checkpoint([&](const std::vector<Tensor>& in) { return in; }, {x, Tensor()}), "checkpoint",
                   "input 1 is undefined");

  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{linear(in[0], w)}; };
  Tensor y = sum(checkpoint(fn, {x})[0]);
  y.backward();
  EXPECT_ERROR_HAS(y.backward(), "checkpoint", "retain_graph");

  Tensor x2 = randn({4, 6}, gen);
  Tensor y2 = sum(checkpoint(fn, {x2})[0]);
  {
    NoGradGuard no_grad;
    fill_(x2, 1.0);
  }
  EXPECT_ERROR_HAS(y2.backward(), "checkpoint", "modified in place");

  EXPECT_ERROR_HAS(checkpoint(fn, {x}, {.offload = {1}}), "checkpoint", "offload names input 1", "has 1");
  Tensor y3 = sum(checkpoint(fn, {x}, {.offload = {0}})[0]);
  y3.backward();
  EXPECT_ERROR_HAS(y3.backward(), "checkpoint", "already freed", "retain_graph");

  nn::Linear lin(6, 6);
  EXPECT_ERROR_HAS(lin.gradient_checkpointing_enable(), "gradient_checkpointing_enable", "Linear",
                   "LlamaModel and GPT2Model");
}

TEST(Checkpoint, AModuleSwitchedToEvalBeforeBackwardIsCaught) {
  Generator gen(16);
  nn::GPT2LMHeadModel model(gpt2_dropout(), gen);
  model.gradient_checkpointing_enable();
  Tensor ids = randint(0, 37, {2, 8}, gen, {.dtype = kInt64});
  Tensor loss = model.loss(ids, ids);
  model.eval();
  EXPECT_ERROR_HAS(loss.backward(), "checkpoint", "other numbers than the forward", "train and eval");
}

TEST(Checkpoint, AnIdentityOutputKeepsTheInputIntact) {
  Generator gen(17);
  Tensor x = randn({3}, gen, {.requires_grad = true});
  auto out = checkpoint([](const std::vector<Tensor>& in) { return in; }, {x});
  EXPECT_TRUE(x.is_leaf()) << "the input took the checkpoint node as grad_fn";
  sum(mul(out[0], 3.0)).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 3, 3}));
}

}  // namespace
}  // namespace tg
