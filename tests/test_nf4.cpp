// bitsandbytes' 4-bit format (ops/nf4.h) against the float reference of
// tests/fixtures/nf4/make_fixtures.py, byte for byte; its errors; linear_4bit, nn::Linear4bit,
// replace_with_4bit_linear and LoRA on a 4-bit base (QLoRA) against dequantise-then-dense.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/primitives.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/init.h"
#include "nn/linear4bit.h"
#include "nn/models/llama.h"
#include "nn/models/quantization.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/linear.h"
#include "ops/nf4.h"
#include "ops/nf4_math.h"
#include "ops/reduce.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;
const fs::path kFixture = fs::path(TG_TESTS_DIR) / "fixtures" / "nf4" / "expected.safetensors";

struct Case {
  std::string name, quant_type;
  bool double_quant;
};

const safetensors::Loaded& fixture() {
  static const safetensors::Loaded f = safetensors::load_file_with_metadata(kFixture.string());
  return f;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& [name, text] : fixture().metadata) {
    const json::Value v = json::parse(text);
    out.push_back({name, v.at("quant_type").as_string(), v.at("double_quant").as_bool()});
  }
  return out;
}

const Tensor& part(const Case& c, const std::string& what) { return fixture().tensors.at(c.name + "." + what); }

template <class T>
std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> out;
  for (T v : t.to_vector<T>()) {
    uint32_t b = 0;
    std::memcpy(&b, &v, sizeof v);
    out.push_back(b);
  }
  return out;
}

// The state as the fixture stores it (bitsandbytes' as_dict pieces).
QuantState4bit state_of(const Case& c) {
  QuantState4bit q;
  q.packed = part(c, "packed");
  q.absmax = part(c, "absmax");
  q.quant_map = part(c, "quant_map");
  if (c.double_quant) {
    q.nested_absmax = part(c, "nested_absmax");
    q.nested_quant_map = part(c, "nested_quant_map");
    q.offset = part(c, "offset").item<float>();
  }
  q.shape = part(c, "weight").shape();
  q.dtype = part(c, "weight").dtype();
  q.quant_type = c.quant_type;
  return q;
}

TEST(NF4, FixtureHasEveryCase) {
  std::vector<std::string> names;
  for (const Case& c : cases()) names.push_back(c.name);
  for (const char* want : {"random", "odd_size", "zeros", "zeros_fp4", "huge", "thresholds", "bf16", "fp4",
                           "many_blocks"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

TEST(NF4, QuantizeGivesTheReferenceBytes) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const QuantState4bit q = quantize_4bit(part(c, "weight"), c.quant_type, c.double_quant);
    EXPECT_EQ(q.packed.to_vector<uint8_t>(), part(c, "packed").to_vector<uint8_t>());
    EXPECT_EQ(bits_of<float>(q.quant_map), bits_of<float>(part(c, "quant_map")));
    EXPECT_EQ(q.nested(), c.double_quant);
    if (c.double_quant) {
      EXPECT_EQ(q.absmax.to_vector<uint8_t>(), part(c, "absmax").to_vector<uint8_t>());
      EXPECT_EQ(bits_of<float>(q.nested_absmax), bits_of<float>(part(c, "nested_absmax")));
      EXPECT_EQ(bits_of<float>(q.nested_quant_map), bits_of<float>(part(c, "nested_quant_map")));
      EXPECT_EQ(q.offset, part(c, "offset").item<float>());
    } else {
      EXPECT_EQ(bits_of<float>(q.absmax), bits_of<float>(part(c, "absmax")));
    }
    EXPECT_EQ(q.shape, part(c, "weight").shape());
  }
}

TEST(NF4, DequantizeGivesTheReferenceValues) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(bits_of<float>(dequantize_4bit(state_of(c), kFloat32)), bits_of<float>(part(c, "dequantized")));
    const Tensor b = dequantize_4bit(state_of(c), kBFloat16);
    EXPECT_EQ(b.dtype(), kBFloat16);
    EXPECT_EQ(bits_of<float>(tg::to(b, kFloat32)), bits_of<float>(tg::to(part(c, "dequantized_bf16"), kFloat32)));
  }
}

TEST(NF4, AdversarialCasesMeanWhatTheyClaim) {
  // An all-zero block: absmax 0, every code 0 (bitsandbytes' NaN path), dequantised to -0.
  const Case zeros{"zeros", "nf4", false};
  EXPECT_EQ(part(zeros, "absmax").to_vector<float>()[0], 0.0f);
  const std::vector<uint8_t> packed = part(zeros, "packed").to_vector<uint8_t>();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(packed[i], 0) << i;
  // Values exactly on a threshold take the lower code (the tree compares x > t).
  EXPECT_EQ(nf4::quantize_code(0.03979014977812767f, nf4::kNF4Codebook), 0b0111);
  EXPECT_EQ(nf4::quantize_code(std::nextafter(0.03979014977812767f, 1.0f), nf4::kNF4Codebook), 0b1000);
  EXPECT_EQ(nf4::quantize_code(std::numeric_limits<float>::quiet_NaN(), nf4::kNF4Codebook), 0);
  EXPECT_EQ(nf4::quantize_code(std::numeric_limits<float>::quiet_NaN(), nf4::kFP4Codebook), 0);
  EXPECT_EQ(nf4::quantize_code(-0.9f, nf4::kFP4Codebook), 0b1011);  // -12/12: sign bit and 0b0011
  // 266 blocks: two nested blocks of 256.
  EXPECT_EQ(part({"many_blocks", "nf4", true}, "nested_absmax").numel(), 2);
  // An odd count pads the last low nibble with the code of 0 (0b0111).
  EXPECT_EQ(part({"odd_size", "nf4", true}, "packed").to_vector<uint8_t>().back() & 0x0F, 0b0111);
}

TEST(NF4, DynamicMapIsBitsandbytesShape) {
  const std::vector<float>& m = dynamic_map_8bit();
  ASSERT_EQ(m.size(), 256u);
  EXPECT_EQ(m.front(), -m[254]);
  EXPECT_EQ(m.back(), 1.0f);
  EXPECT_TRUE(std::is_sorted(m.begin(), m.end()));
  EXPECT_EQ(std::count(m.begin(), m.end(), 0.0f), 1);
}

TEST(NF4, RefusesNonFiniteWeights) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> w(100, 0.5f);
    w[70] = bad;
    EXPECT_ERROR_HAS(quantize_4bit(from_vector(w, {10, 10})), "quantize_4bit", "'weight'", "element 70");
    EXPECT_ERROR_HAS(quantize_4bit(tg::to(from_vector(w, {100}), kBFloat16), "nf4", true), "element 70");
  }
}

TEST(NF4, RefusesBadArguments) {
  const Tensor w = from_vector(std::vector<float>(96, 1.0f), {8, 12});
  EXPECT_ERROR_HAS(quantize_4bit(w, "int4"), "quant_type 'int4'", "nf4 or fp4");
  EXPECT_ERROR_HAS(quantize_4bit(w, "nf4", false, 48), "blocksize 48");
  EXPECT_ERROR_HAS(quantize_4bit(from_vector(std::vector<double>(4, 1.0))), "float64", "float32 or bfloat16");
}

TEST(NF4, RefusesAStateThatDoesNotFit) {
  const QuantState4bit good = quantize_4bit(from_vector(std::vector<float>(200, 0.25f), {10, 20}), "nf4", true);
  auto bad = [&](auto change) {
    QuantState4bit q = good;
    change(q);
    return q;
  };
  EXPECT_ERROR_HAS(dequantize_4bit(bad([](auto& q) { q.packed = zeros({99}, {kUInt8}); }), kFloat32), "'weight'",
                   "shape [99]", "wants 100 values");
  EXPECT_ERROR_HAS(dequantize_4bit(bad([](auto& q) { q.packed = zeros({100}, {kInt32}); }), kFloat32), "'weight'",
                   "int32", "uint8");
  EXPECT_ERROR_HAS(dequantize_4bit(bad([](auto& q) { q.quant_map = zeros({15}); }), kFloat32), "'weight.quant_map'",
                   "wants 16 values");
  EXPECT_ERROR_HAS(dequantize_4bit(bad([](auto& q) { q.absmax = zeros({3}, {kUInt8}); }), kFloat32),
                   "'weight.absmax'", "shape [3]", "wants 4 values");
  EXPECT_ERROR_HAS(dequantize_4bit(bad([](auto& q) { q.absmax = zeros({4}); }), kFloat32), "'weight.absmax'",
                   "float32", "wants uint8");
  EXPECT_ERROR_HAS(dequantize_4bit(bad([](auto& q) { q.nested_quant_map = zeros({255}); }), kFloat32),
                   "'weight.nested_quant_map'", "wants 256 values");
  EXPECT_ERROR_HAS(dequantize_4bit(bad([](auto& q) { q.nested_absmax = zeros({2}); }), kFloat32),
                   "'weight.nested_absmax'", "wants 1 values");
  EXPECT_ERROR_HAS(dequantize_4bit(bad([](auto& q) { q.quant_type = "af4"; }), kFloat32), "quant_type 'af4'");
  // bitsandbytes' [(n + 1) / 2, 1] column is accepted.
  EXPECT_NO_THROW(dequantize_4bit(bad([](auto& q) { q.packed = zeros({100, 1}, {kUInt8}); }), kFloat32));
  EXPECT_ERROR_HAS(dequantize_4bit_(zeros({199}), good), "'out'", "[199]", "wants 200");
}

// States equal piece by piece, bitwise (any devices).
void expect_same_state(const QuantState4bit& a, const QuantState4bit& b) {
  EXPECT_EQ(a.packed.to_vector<uint8_t>(), b.packed.to_vector<uint8_t>());
  EXPECT_EQ(a.nested(), b.nested());
  if (a.nested()) {
    EXPECT_EQ(a.absmax.to_vector<uint8_t>(), b.absmax.to_vector<uint8_t>());
    EXPECT_EQ(bits_of<float>(a.nested_absmax), bits_of<float>(b.nested_absmax));
    EXPECT_EQ(bits_of<float>(a.nested_quant_map), bits_of<float>(b.nested_quant_map));
    EXPECT_EQ(a.offset, b.offset);
  } else {
    EXPECT_EQ(bits_of<float>(a.absmax), bits_of<float>(b.absmax));
  }
  EXPECT_EQ(bits_of<float>(a.quant_map), bits_of<float>(b.quant_map));
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.dtype, b.dtype);
}

// The CPU quantises blocks in parallel: any thread count gives the same bytes, and a NaN is
// reported at its first element whichever thread met it.
TEST(NF4, QuantizeIsTheSameOnAnyThreadCount) {
  const int saved = get_num_threads();
  Generator gen(3);
  const Tensor w = tg::to(randn({300, 1000}, gen), kBFloat16);  // 4688 blocks: several threads' worth
  set_num_threads(1);
  const QuantState4bit one = quantize_4bit(w, "nf4", true);
  set_num_threads(4);
  const QuantState4bit four = quantize_4bit(w, "nf4", true);
  std::vector<float> v(300 * 1000, 0.5f);
  v[250000] = v[260000] = std::numeric_limits<float>::infinity();
  EXPECT_ERROR_HAS(quantize_4bit(from_vector(v, {300, 1000})), "inf at element 250000");
  set_num_threads(saved);
  expect_same_state(one, four);
}

class Linear4bitTest : public testing::SeededTest {};

TEST_F(Linear4bitTest, ForwardAndBackwardAreDequantiseThenLinear) {
  const Tensor w = randn({12, 40}, gen);
  const QuantState4bit q = quantize_4bit(w, "nf4", true);
  const Tensor dense = dequantize_4bit(q, kFloat32);
  Tensor x = randn({2, 3, 40}, gen).requires_grad_(), b = randn({12}, gen).requires_grad_();
  Tensor x2 = x.detach().requires_grad_(), b2 = b.detach().requires_grad_();
  Tensor g = randn({2, 3, 12}, gen);
  Tensor y = linear_4bit(x, q, b, zeros({480}));
  Tensor y2 = linear(x2, dense, b2);
  EXPECT_TENSOR_NEAR(y, y2, 1e-6, 1e-6);
  y.backward(g);
  y2.backward(g);
  EXPECT_TENSOR_NEAR(x.grad(), x2.grad(), 1e-6, 1e-6);
  EXPECT_TENSOR_NEAR(b.grad(), b2.grad(), 1e-6, 1e-6);
  EXPECT_ERROR_HAS(linear_4bit(randn({2, 39}, gen), q), "linear_4bit", "wants 40 features");
  EXPECT_ERROR_HAS(linear_4bit(x, q, {}, zeros({479})), "workspace has 479 elements", "at least 480");
}

// Two layers sharing one workspace: the backward dequantises each weight again, so the second
// forward overwriting the buffer changes no gradient.
TEST_F(Linear4bitTest, SharedWorkspaceKeepsGradientsRight) {
  const Tensor w1 = randn({16, 16}, gen), w2 = randn({16, 16}, gen);
  const QuantState4bit q1 = quantize_4bit(w1), q2 = quantize_4bit(w2);
  const Tensor ws = zeros({256});
  Tensor x = randn({5, 16}, gen).requires_grad_(), x2 = x.detach().requires_grad_();
  Tensor y = linear_4bit(linear_4bit(x, q1, {}, ws), q2, {}, ws);
  Tensor y2 = linear(linear(x2, dequantize_4bit(q1, kFloat32)), dequantize_4bit(q2, kFloat32));
  EXPECT_TENSOR_NEAR(y, y2, 1e-6, 1e-6);
  sum(mul(y, y)).backward();
  sum(mul(y2, y2)).backward();
  EXPECT_TENSOR_NEAR(x.grad(), x2.grad(), 1e-5, 1e-5);
}

TEST_F(Linear4bitTest, RefusesAWeightGradient) {
  nn::Linear base(24, 6, true, gen);
  nn::Linear4bit layer(quantize_4bit(base.weight), base.bias, kFloat32);
  EXPECT_EQ(layer.weight.dtype(), kUInt8);
  EXPECT_ERROR_HAS(layer.weight.requires_grad_(true), "requires_grad_", "uint8");
  layer.requires_grad_(true);  // the bias trains; the packed weight stays frozen
  EXPECT_FALSE(layer.weight.requires_grad());
  Tensor x = randn({3, 24}, gen);
  sum(layer.forward(x)).backward();
  EXPECT_FALSE(layer.weight.grad().defined());
  EXPECT_TRUE(layer.bias.grad().defined());
  EXPECT_EQ(layer.forward(tg::to(x, kBFloat16)).dtype(), kBFloat16);  // back to x's dtype
  EXPECT_ERROR_HAS(nn::Linear4bit(quantize_4bit(base.weight), base.bias, kFloat64), "compute_dtype float64");
}

nn::LlamaConfig micro() {
  nn::LlamaConfig c;
  c.vocab_size = 13;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 8;
  return c;
}

Tensor ids_2x6() { return from_vector<int64_t>({1, 5, 2, 12, 0, 7, 3, 3, 9, 4, 11, 6}, {2, 6}); }

// Every quantised Linear's weight replaced by its dequantised values in a dense copy of the model.
void load_dequantised(nn::Module& dense, nn::Module& quantised) {
  NoGradGuard g;
  for (auto& [path, m] : quantised.named_modules()) {
    const nn::QuantizedLinear* q = dynamic_cast<nn::Linear4bit*>(m);
    if (const auto* l = dynamic_cast<peft::LoRALinear*>(m); l && l->quantized_base) q = l->quantized_base.get();
    if (!q) continue;
    copy_(dense.get_parameter(path + ".weight"), q->dequantized_weight(kFloat32));
  }
}

TEST_F(Linear4bitTest, ReplacesEveryLinearButTheHead) {
  Generator g2 = gen;
  nn::LlamaForCausalLM model(micro(), gen), dense(micro(), g2);
  const nn::QuantizationConfig config{.load_in_4bit = true, .quant_type = "nf4", .double_quant = true,
                                      .compute_dtype = kFloat32};
  const std::vector<std::string> paths = nn::replace_with_4bit_linear(model, config);
  EXPECT_EQ(paths.size(), 14u);  // 2 layers x (q, k, v, o, gate, up, down)
  EXPECT_EQ(model.lm_head->type_name(), "Linear");
  EXPECT_NE(dynamic_cast<nn::Linear4bit*>(model.get_submodule("model.layers.1.mlp.down_proj").get()), nullptr);
  load_dequantised(dense, model);
  EXPECT_TENSOR_NEAR(model.forward(ids_2x6()), dense.forward(ids_2x6()), 1e-5, 1e-5);
  EXPECT_ERROR_HAS(nn::replace_with_4bit_linear(model, config), "already quantised");
  EXPECT_ERROR_HAS(nn::replace_with_4bit_linear(model, {}), "load_in_4bit = false");
  // a NaN anywhere leaves the model unchanged
  nn::LlamaForCausalLM other(micro(), gen);
  {
    NoGradGuard ng;
    fill_((*other.model->layers)[1].mlp->down_proj->weight, std::nan(""));
  }
  EXPECT_ERROR_HAS(nn::replace_with_4bit_linear(other, config), "model.layers.1.mlp.down_proj.weight", "nan");
  EXPECT_EQ((*other.model->layers)[0].self_attn->q_proj->type_name(), "Linear");
}

// Module::to(dtype) casts a quantised model like any (the norms, embedding, head and biases) and
// leaves the 4-bit state float32 and the workspace in the compute dtype, LoRA wrapped or not.
TEST_F(Linear4bitTest, CastingAQuantisedModelKeepsItsState) {
  nn::LlamaForCausalLM model(micro(), gen);
  nn::replace_with_4bit_linear(model, {.load_in_4bit = true, .compute_dtype = kBFloat16});
  peft::LoraConfig lc;
  lc.target_modules = {"q_proj", "down_proj"};
  peft::apply_lora(model, lc);
  const Tensor before = model.forward(ids_2x6());
  model.to(kBFloat16);
  for (auto& [name, t] : model.named_buffers())
    if (name.ends_with("absmax") || name.ends_with("quant_map"))
      EXPECT_EQ(t.dtype(), name.ends_with(".absmax") ? kUInt8 : kFloat32) << name;
    else if (name.ends_with("workspace"))
      EXPECT_EQ(t.dtype(), kBFloat16) << name;
  EXPECT_EQ(model.model->embed_tokens->weight.dtype(), kBFloat16);
  const Tensor after = model.forward(ids_2x6());
  EXPECT_EQ(after.dtype(), kBFloat16);
  EXPECT_TENSOR_NEAR(tg::to(after, kFloat32), before, 0.1, 0.05);
}

// QLoRA: LoRA on the 4-bit base computes base(x) + scaling B(A(x)) and trains A and B only, as
// LoRA on the dequantised dense base does.
TEST_F(Linear4bitTest, LoraOnAQuantisedBaseMatchesLoraOnTheDequantisedBase) {
  Generator g2 = gen;
  nn::LlamaForCausalLM model(micro(), gen), dense(micro(), g2);
  nn::replace_with_4bit_linear(model, {.load_in_4bit = true, .compute_dtype = kFloat32});
  load_dequantised(dense, model);
  peft::LoraConfig lc;
  lc.target_modules = {"q_proj", "v_proj", "down_proj"};
  Generator ga(7), gb(7);
  const peft::LoraReport report = peft::apply_lora(model, lc, ga);
  peft::apply_lora(dense, lc, gb);
  EXPECT_EQ(report.wrapped.size(), 6u);
  for (auto& [path, l] : peft::lora_layers(model)) {
    ASSERT_NE(l->quantized_base, nullptr) << path;
    EXPECT_EQ(l->lora_A->weight.dtype(), kFloat32);
    nn::init::normal_(l->lora_B->weight, 0.0, 0.1, gen);
    NoGradGuard ng;
    copy_(dense.get_parameter(path + ".lora_B.weight"), l->lora_B->weight);
  }
  Tensor loss = model.loss(ids_2x6(), ids_2x6()), loss2 = dense.loss(ids_2x6(), ids_2x6());
  EXPECT_NEAR(loss.item<float>(), loss2.item<float>(), 1e-5);
  loss.backward();
  loss2.backward();
  const auto trainable = model.named_trainable_parameters();
  EXPECT_EQ(trainable.size(), 12u);
  for (auto& [name, t] : trainable) {
    EXPECT_TRUE(name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight")) << name;
    ASSERT_TRUE(t.grad().defined()) << name;
    EXPECT_TENSOR_NEAR(t.grad(), dense.get_parameter(name).grad(), 1e-4, 1e-5);
  }
  for (auto& [path, m] : model.named_modules())
    if (auto* q = dynamic_cast<nn::Linear4bit*>(m)) EXPECT_FALSE(q->weight.grad().defined()) << path;
  EXPECT_ERROR_HAS(peft::merge(model), "4-bit quantised");
}

TEST_F(Linear4bitTest, GpuDequantizeMatchesTheCpuBitwise) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const QuantState4bit q = state_of(c).to(Device::cuda(0));
    for (DType dt : {kFloat32, kBFloat16})
      EXPECT_EQ(bits_of<float>(tg::to(tg::to(dequantize_4bit(q, dt), Device::cpu()), kFloat32)),
                bits_of<float>(tg::to(dequantize_4bit(state_of(c), dt), kFloat32)));
  }
  const QuantState4bit q = quantize_4bit(tg::to(randn({64, 48}, gen), Device::cuda(0)), "nf4", true);
  EXPECT_TRUE(q.absmax.device().is_cuda() && q.nested_absmax.device().is_cuda());
  EXPECT_TRUE(q.packed.device().is_cuda());
  Tensor x = randn({5, 48}, gen);
  EXPECT_TENSOR_NEAR(tg::to(linear_4bit(tg::to(x, Device::cuda(0)), q), Device::cpu()),
                     linear_4bit(x, q.to(Device::cpu())), 1e-4, 1e-4);
}

// The GPU quantisation kernel gives the CPU's bytes: the fixture's weights (zeros, one huge value
// a block, exact thresholds, odd sizes, bf16, many blocks), large random ones, every blocksize.
TEST_F(Linear4bitTest, GpuQuantizeGivesTheCpuBytes) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  const Device gpu = Device::cuda(0);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor w = part(c, "weight");
    expect_same_state(quantize_4bit(tg::to(w, gpu), c.quant_type, c.double_quant),
                      quantize_4bit(w, c.quant_type, c.double_quant));
  }
  const Tensor big = tg::to(mul(randn({1031, 777}, gen), 0.02), kBFloat16);  // odd count, bf16
  for (int64_t blocksize : {32, 64, 128, 4096})
    for (const char* type : {"nf4", "fp4"}) {
      SCOPED_TRACE(std::string(type) + " blocksize " + std::to_string(blocksize));
      expect_same_state(quantize_4bit(tg::to(big, gpu), type, true, blocksize), quantize_4bit(big, type, true, blocksize));
    }
  std::vector<float> v(100000, 0.5f);
  v[77777] = std::nanf("");
  v[99999] = std::numeric_limits<float>::infinity();
  EXPECT_ERROR_HAS(quantize_4bit(from_vector(v, {100000}, gpu)), "quantize_4bit", "nan at element 77777");
}

}  // namespace
}  // namespace tg::test
