// FP8 (e4m3) weights (ops/fp8.h): the rounding against an exhaustive float reference, block and
// row scales, saturation at 448, sizes that are not whole blocks, NaN / inf refused, activation
// tiles; linear_fp8 on the CPU against dequantise-then-dense; on the GPU the kernels' bytes against
// the CPU's and the FP8 GEMMs (forward and dx) against dequantise-then-bfloat16.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/fp8.h"
#include "ops/fp8_math.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "nn/linear_fp8.h"
#include "nn/models/llama.h"
#include "nn/models/pretrained.h"
#include "nn/models/quantization.h"
#include "optim/optimizer.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/qlora_tiny_run.h"
#include "tests/test_models.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

// The nearest finite e4m3 value by search over all 254 of them (ties to the even byte), saturated.
float nearest_e4m3(float x) {
  float best = 0.0f, best_err = std::numeric_limits<float>::infinity();
  int best_byte = 0;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float v = fp8::from_e4m3(static_cast<uint8_t>(b));
    const double exact = std::fabs(static_cast<double>(v) - x);
    if (exact < best_err || (exact == best_err && (b & 1) == 0 && (best_byte & 1) == 1)) {
      best = v, best_err = static_cast<float>(exact), best_byte = b;
    }
  }
  return best;
}

TEST(Fp8, EveryByteDecodesAndEncodesBack) {
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(fp8::from_e4m3(byte))) << b;
      continue;
    }
    if (b == 0x80) continue;  // -0 encodes as -0: checked below
    EXPECT_EQ(fp8::to_e4m3(fp8::from_e4m3(byte)), byte) << b;
  }
  EXPECT_EQ(fp8::to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(fp8::from_e4m3(0x7e), 448.0f);
  EXPECT_EQ(fp8::from_e4m3(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(fp8::from_e4m3(0x08), std::ldexp(1.0f, -6));  // the smallest normal
}

TEST(Fp8, RoundsToTheNearestValueTiesToEvenAndSaturates) {
  Generator gen(5);
  std::vector<float> xs = randn({20000}, gen).to_vector<float>();
  for (float& x : xs) x *= 60.0f;
  // Ties: midpoints between neighbours, normal and subnormal, and the saturation edge.
  for (int b = 0; b < 0x7e; ++b) {
    const float lo = fp8::from_e4m3(static_cast<uint8_t>(b)), hi = fp8::from_e4m3(static_cast<uint8_t>(b + 1));
    xs.push_back((lo + hi) / 2);
    xs.push_back(-(lo + hi) / 2);
    xs.push_back(std::nextafter((lo + hi) / 2, 0.0f));
  }
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e9f, -1e30f, 1e-12f, std::ldexp(1.0f, -10)}) xs.push_back(x);
  for (float x : xs) {
    const float want = std::fabs(x) >= 448.0f ? std::copysign(448.0f, x) : nearest_e4m3(x);
    EXPECT_EQ(fp8::from_e4m3(fp8::to_e4m3(x)), want) << x;
  }
  EXPECT_EQ(fp8::to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(fp8::to_e4m3(std::nanf("")), 0x7f);
}

// Each block's multiplier is its max |w| / 448, and each value is the nearest e4m3 of w / scale.
void expect_reference_quantisation(const Tensor& w, const Fp8Weight& q, int64_t br, int64_t bc) {
  const Tensor wf = to(w, kFloat32);
  const std::vector<float> v = wf.to_vector<float>(), s = q.scale_inv.to_vector<float>();
  const std::vector<uint8_t> bytes = q.data.to_vector<uint8_t>();
  const int64_t rows = w.shape()[0], cols = w.shape()[1], bcs = (cols + bc - 1) / bc;
  std::vector<float> amax(s.size(), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& m = amax[(r / br) * bcs + c / bc];
      m = std::max(m, std::fabs(v[r * cols + c]));
    }
  for (size_t b = 0; b < s.size(); ++b) ASSERT_EQ(s[b], amax[b] > 0 ? amax[b] / 448.0f : 1.0f) << b;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float scale = s[(r / br) * bcs + c / bc];
      ASSERT_EQ(fp8::from_e4m3(bytes[r * cols + c]), nearest_e4m3(std::min(448.0f, std::max(-448.0f, v[r * cols + c] / scale))))
          << r << ", " << c;
    }
}

TEST(Fp8, BlockScalesOfWholeAndPartialBlocks) {
  Generator gen(7);
  for (Shape shape : {Shape{256, 384}, Shape{300, 200}, Shape{5, 130}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    Tensor w = mul(randn(shape, gen), 0.05);
    const Fp8Weight q = quantize_fp8(w);
    EXPECT_EQ(q.scale_inv.shape(), Shape({(shape[0] + 127) / 128, (shape[1] + 127) / 128}));
    expect_reference_quantisation(w, q, 128, 128);
    // Dequantised: within half an e4m3 step of w (relative 2^-4; absolute 2^-10 * scale below 2^-6).
    const std::vector<float> d = dequantize_fp8(q, kFloat32).to_vector<float>(), v = w.to_vector<float>();
    const float smax = max(q.scale_inv).item<float>();
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_LE(std::fabs(d[i] - v[i]), std::max(std::fabs(v[i]) / 16, smax / 1024) * 1.0001f) << i;
  }
}

TEST(Fp8, RowScalesAndBFloat16Weights) {
  Generator gen(8);
  Tensor w = to(mul(randn({70, 33}, gen), 3.0), kBFloat16);
  const Fp8Weight q = quantize_fp8(w, Fp8Scaling::Row);
  EXPECT_EQ(q.scale_inv.shape(), Shape({70, 1}));
  expect_reference_quantisation(w, q, 1, 33);
  EXPECT_EQ(dequantize_fp8(q, kBFloat16).dtype(), kBFloat16);
  EXPECT_TENSOR_EQ(dequantize_fp8(q, kBFloat16), to(dequantize_fp8(q, kFloat32), kBFloat16));
}

TEST(Fp8, ZeroBlocksAndTheLargestValueOfABlock) {
  std::vector<float> v(128 * 256, 0.0f);
  v[5] = -1000.0f;  // the first block's max: exactly -448 once scaled
  v[200] = 3.0f;  // the second block: all zero but this
  const Fp8Weight q = quantize_fp8(from_vector(v, {128, 256}));
  EXPECT_EQ(q.scale_inv.to_vector<float>(), std::vector<float>({1000.0f / 448.0f, 3.0f / 448.0f}));
  EXPECT_EQ(q.data.to_vector<uint8_t>()[5], 0xfe);  // -448
  const std::vector<float> d = dequantize_fp8(q, kFloat32).to_vector<float>();
  EXPECT_FLOAT_EQ(d[5], -1000.0f);
  EXPECT_FLOAT_EQ(d[200], 3.0f);
  EXPECT_EQ(d[128 * 256 - 1], 0.0f);
}

TEST(Fp8, NanAndInfAreRefusedNamingTheElement) {
  std::vector<float> v(40 * 300, 0.25f);
  v[7 * 300 + 11] = std::nanf("");
  v[30 * 300 + 2] = std::numeric_limits<float>::infinity();
  EXPECT_ERROR_HAS(quantize_fp8(from_vector(v, {40, 300})), "quantize_fp8", "nan at [7, 11]", "finite");
  v[7 * 300 + 11] = 0.0f;
  EXPECT_ERROR_HAS(quantize_fp8(from_vector(v, {40, 300}), Fp8Scaling::Row), "inf at [30, 2]");
  EXPECT_ERROR_HAS(quantize_fp8(zeros({4})), "quantize_fp8", "[out, in]");
  EXPECT_ERROR_HAS(quantize_fp8(zeros({4, 4}, {kInt64})), "quantize_fp8", "float32 or bfloat16");
}

TEST(Fp8, BadPiecesAreNamed) {
  Fp8Weight q = quantize_fp8(full({200, 300}, 1.0));
  Fp8Weight bad = q;
  bad.scale_inv = zeros({2, 2});
  EXPECT_ERROR_HAS(check_fp8_weight(bad, "model.q_proj.weight"), "model.q_proj.weight_scale_inv", "[2, 2]",
                   "wants [2, 3]", "128x128");
  bad = q;
  bad.scaling = Fp8Scaling::Row;
  EXPECT_ERROR_HAS(check_fp8_weight(bad), "weight_scale_inv", "wants [200, 1]");
  bad = q;
  bad.data = zeros({200, 300});
  EXPECT_ERROR_HAS(check_fp8_weight(bad), "'weight' has dtype float32", "uint8");
  EXPECT_ERROR_HAS(linear_fp8(zeros({3, 299}), q), "linear_fp8", "wants 300 features");
}

TEST(Fp8, ActivationTilesAndRows) {
  Generator gen(9);
  const Tensor x = mul(randn({6, 300}, gen), 4.0);
  const Fp8Activation tiles = quantize_fp8_activation(x, 128);
  EXPECT_EQ(tiles.scale.shape(), Shape({6, 3}));
  EXPECT_EQ(tiles.scale.strides(), std::vector<int64_t>({1, 6}));  // [tiles, rows] underneath
  // A 1x128 tile quantises as a weight of one row a time would.
  for (int64_t r = 0; r < 6; ++r) {
    const Tensor row = slice(x, 0, r, r + 1);
    const Fp8Weight one = quantize_fp8(row);
    EXPECT_EQ(one.data.to_vector<uint8_t>(), slice(tiles.data, 0, r, r + 1).to_vector<uint8_t>());
    EXPECT_EQ(one.scale_inv.to_vector<float>(), contiguous(slice(tiles.scale, 0, r, r + 1)).to_vector<float>());
  }
  const Fp8Activation rows = quantize_fp8_activation(x, 0);
  EXPECT_EQ(rows.scale.shape(), Shape({6, 1}));
  EXPECT_EQ(rows.data.to_vector<uint8_t>(), quantize_fp8(x, Fp8Scaling::Row).data.to_vector<uint8_t>());
  EXPECT_ERROR_HAS(quantize_fp8_activation(x, 64), "quantize_fp8_activation", "tile 64");
}

TEST(Fp8, CpuLinearIsDequantiseThenLinear) {
  Generator gen(10);
  const Fp8Weight q = quantize_fp8(mul(randn({140, 260}, gen), 0.1));
  Tensor x = randn({2, 3, 260}, gen).requires_grad_(true);
  Tensor b = randn({140}, gen).requires_grad_(true);
  KernelTrace trace;
  Tensor y = linear_fp8(x, q, b);
  EXPECT_TRUE(trace.contains("linear_fp8.dequantized_forward"));
  const Tensor w = dequantize_fp8(q, kFloat32);
  Tensor xr = x.detach().requires_grad_(true), br = b.detach().requires_grad_(true);
  Tensor yr = linear(xr, w, br);
  EXPECT_TENSOR_EQ(y, yr);
  const Tensor g = randn(y.shape(), gen);
  sum(mul(y, g)).backward();
  sum(mul(yr, g)).backward();
  EXPECT_TENSOR_NEAR(x.grad(), xr.grad(), 1e-5, 1e-6);  // matmul against linear's backward: another order
  EXPECT_TENSOR_EQ(b.grad(), br.grad());
}

// ------------------------------------------------------------------------- LinearFp8 and LoRA

const nn::QuantizationConfig kFp8{.load_in_fp8 = true, .compute_dtype = kFloat32};

int count_fp8(nn::Module& m) {
  int n = 0;
  for (auto& [path, sub] : m.named_modules()) n += dynamic_cast<nn::LinearFp8*>(sub) != nullptr;
  return n;
}

class LinearFp8Test : public testing::SeededTest {
 protected:
  TempDir tmp;
};

TEST_F(LinearFp8Test, LayerIsFrozenAndNamedAsTheCheckpoints) {
  const Fp8Weight q = quantize_fp8(mul(randn({40, 30}, gen), 0.1));
  nn::LinearFp8 layer(q, randn({40}, gen), kFloat32);
  const nn::StateDict sd = layer.state_dict();
  EXPECT_EQ(sd.at("weight").dtype(), kUInt8);
  EXPECT_EQ(sd.at("weight_scale_inv").shape(), Shape({1, 1}));
  EXPECT_TRUE(sd.count("bias"));
  EXPECT_ERROR_HAS(layer.weight.requires_grad_(true), "requires_grad_", "floating-point");
  layer.to(kBFloat16);
  EXPECT_EQ(layer.fp8.scale_inv.dtype(), kFloat32);  // the multipliers keep float32
  EXPECT_EQ(layer.bias.dtype(), kBFloat16);
  const Tensor x = randn({3, 30}, gen);
  const Tensor y = layer.forward(x);
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_TENSOR_EQ(y, linear_fp8(x, q, to(layer.bias, kFloat32)));
  EXPECT_ERROR_HAS(nn::LinearFp8(q, Tensor(), kFloat64), "LinearFp8", "compute_dtype float64");
}

// LoRA on an FP8 base: the base frozen (no gradient reaches its weight), the adapters train and the
// loss falls as on the dense base (within 1%); merge refuses, merge_and_unload dequantises (and says so) into dense layers that
// compute what the LoRA model did; the adapter file holds the adapters only (peft's layout).
std::vector<double> lora_losses(nn::Module& model, int steps) {
  model.train();
  Generator gen(52);
  peft::apply_lora(model, tiny_qlora_lora("base"), gen);
  optim::AdamW opt(model.named_trainable_parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  const Tensor ids = tiny_qlora_ids();
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = dynamic_cast<nn::CausalLM&>(model).loss(ids, ids);
    losses.push_back(loss.item());
    loss.backward();
    opt.step();
  }
  return losses;
}

TEST_F(LinearFp8Test, LoraOnAnFp8BaseTrainsAndMergesDequantised) {
  nn::LlamaForCausalLM model(llama_config(), gen);
  nn::LlamaForCausalLM dense(llama_config(), gen);
  dense.load_state_dict(model.state_dict());
  const std::vector<std::string> paths = nn::replace_with_fp8_linear(model, kFp8);
  EXPECT_EQ(count_fp8(model), static_cast<int>(paths.size()));
  EXPECT_ERROR_HAS(nn::replace_with_fp8_linear(model, kFp8), "already quantised");
  EXPECT_ERROR_HAS(nn::replace_with_fp8_linear(model, {}), "load_in_fp8 = false");
  const std::vector<double> losses = lora_losses(model, 20), dense_losses = lora_losses(dense, 20);
  EXPECT_LT(losses.back(), losses.front() - 0.4) << ::testing::PrintToString(losses);
  EXPECT_NEAR(losses.back(), dense_losses.back(), 0.01 * dense_losses.back());  // the FP8 base's rounding only
  const Tensor ids = tiny_qlora_ids();
  for (auto& [path, l] : peft::lora_layers(model)) {
    ASSERT_TRUE(l->quantized_base) << path;
    EXPECT_FALSE(l->weight.grad().defined()) << path;
    EXPECT_TRUE(l->lora_B->weight.grad().defined()) << path;
  }
  EXPECT_ERROR_HAS(peft::merge(model), "FP8 quantised", "LinearFp8");
  peft::save_adapter(model, tmp / "adapter", tiny_qlora_lora("base"));
  const auto saved = safetensors::load_file(tmp / "adapter/adapter_model.safetensors");
  for (const auto& [name, t] : saved) EXPECT_NE(name.find("lora_"), std::string::npos) << name;
  model.eval();
  const Tensor before = model.forward(ids);
  ::testing::internal::CaptureStderr();
  peft::merge_and_unload(model);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("the FP8 base is dequantised to float32"), std::string::npos);
  EXPECT_EQ(count_fp8(model), 0);
  EXPECT_FALSE(peft::has_lora(model));
  EXPECT_TENSOR_NEAR(model.forward(ids), before, 1e-4, 1e-4);
}

// from_pretrained(..., load_in_fp8) quantises each Linear as its weight streams in: the same model,
// bitwise, as loading dense and then replace_with_fp8_linear.
TEST_F(LinearFp8Test, FromPretrainedQuantisesAsItStreams) {
  nn::LlamaForCausalLM source(llama_config(), gen);
  source.to(kBFloat16);
  const std::string dir = tmp / "llama";
  nn::save_pretrained(source, dir);
  const nn::QuantizationConfig q{.load_in_fp8 = true, .compute_dtype = kBFloat16};
  const auto streamed = nn::from_pretrained(dir, {.dtype = kBFloat16, .quantization = q});
  auto dense = nn::from_pretrained(dir, {.dtype = kBFloat16});
  const std::vector<std::string> paths = nn::replace_with_fp8_linear(*dense, q);
  EXPECT_EQ(count_fp8(*streamed), static_cast<int>(paths.size()));
  const nn::StateDict a = streamed->state_dict(), b = dense->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, v] : a) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(b.count(k));
    EXPECT_TENSOR_EQ(v, b.at(k));
  }
  EXPECT_TENSOR_EQ(streamed->forward(tiny_qlora_ids()), dense->forward(tiny_qlora_ids()));
  EXPECT_ERROR_HAS(nn::from_pretrained(dir, {.dtype = kBFloat16, .quantization = {.load_in_4bit = true,
                                                                                   .load_in_fp8 = true}}),
                   "both load_in_4bit and load_in_fp8");
}

// A folder in the FP8 checkpoints' layout (DeepSeek-V3 / Qwen3 FP8): a bf16 Llama saved, then each
// projection's weight replaced by its e4m3 bytes (F8_E4M3) and weight_scale_inv (F32), config.json
// given quantization_config {quant_method "fp8", weight_block_size [128, 128]}. `edit` may change
// the tensors (and `config`, the quantization_config) before they are written.
struct Fp8Folder {
  safetensors::TensorMap tensors;
  json::Value config = json::Value::object()
                           .set("quant_method", "fp8")
                           .set("fmt", "e4m3")
                           .set("activation_scheme", "dynamic")
                           .set("weight_block_size", json::Value::array({int64_t{128}, int64_t{128}}));
};

void write_fp8_folder(nn::LlamaForCausalLM& source, const std::string& dir,
                      const std::function<void(Fp8Folder&)>& edit = {}) {
  source.to(kBFloat16);
  nn::save_pretrained(source, dir);
  Fp8Folder f;
  f.tensors = safetensors::load_file(dir + "/model.safetensors");
  for (auto& [path, m] : source.named_modules()) {
    if (!dynamic_cast<nn::Linear*>(m) || path == "lm_head" || path.empty()) continue;
    const Fp8Weight q = quantize_fp8(f.tensors.at(path + ".weight"));
    f.tensors[path + ".weight"] = q.data;
    f.tensors[path + ".weight_scale_inv"] = q.scale_inv;
  }
  if (edit) edit(f);
  safetensors::save_file(f.tensors, dir + "/model.safetensors");
  // safetensors writes the bytes as U8: the header says F8_E4M3, as torch.float8_e4m3fn saves them.
  std::vector<uint8_t> bytes = io::read_file(dir + "/model.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
  for (size_t at; (at = header.find("\"U8\"")) != std::string::npos;) header.replace(at, 4, "\"F8_E4M3\"");
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out += header;
  out.append(bytes.begin() + 8 + static_cast<int64_t>(n), bytes.end());
  io::write_file_atomic(dir + "/model.safetensors", out);
  const std::vector<uint8_t> c = io::read_file(dir + "/config.json");
  json::Value config = json::parse(std::string(c.begin(), c.end()));
  config.set("quantization_config", f.config);
  io::write_file_atomic(dir + "/config.json", json::dump(config, 2));
}

// An FP8 checkpoint loads as it is: every projection an nn::LinearFp8 holding the file's bytes and
// multipliers, the model bitwise the bf16 one quantised by replace_with_fp8_linear; LoRA trains on it.
TEST_F(LinearFp8Test, Fp8CheckpointLoadsAsItIs) {
  nn::LlamaForCausalLM source(llama_config(), gen);
  const std::string dir = tmp / "fp8";
  write_fp8_folder(source, dir);
  const auto model = nn::from_pretrained(dir, {.dtype = kBFloat16});
  EXPECT_EQ(count_fp8(*model), 14);  // 2 layers of 7 projections; the head stays dense
  nn::replace_with_fp8_linear(source, {.load_in_fp8 = true, .compute_dtype = kBFloat16});
  const nn::StateDict a = model->state_dict(), b = source.state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, v] : a) {
    SCOPED_TRACE(k);
    EXPECT_TENSOR_EQ(v, b.at(k));
  }
  EXPECT_TENSOR_EQ(model->forward(tiny_qlora_ids()), source.forward(tiny_qlora_ids()));
  EXPECT_ERROR_HAS(nn::save_pretrained(*model, tmp / "again"), "save_pretrained", "LinearFp8", "merge_and_unload");
  const std::vector<double> losses = lora_losses(*model, 10);
  EXPECT_LT(losses.back(), losses.front() - 0.2);
}

// Bad folders are refused before any weight is read (or, for the multipliers' values, before the
// model is returned), naming the file, the tensor and what it wants.
TEST_F(LinearFp8Test, BadFp8FoldersAreNamed) {
  const std::string q = "model.layers.0.self_attn.q_proj";
  int n = 0;
  std::string last;
  auto load = [&](const std::function<void(Fp8Folder&)>& edit) {
    nn::LlamaForCausalLM source(llama_config(), gen);
    last = tmp / ("bad" + std::to_string(n++));
    write_fp8_folder(source, last, edit);
    return nn::from_pretrained(last, {.dtype = kBFloat16});
  };
  EXPECT_ERROR_HAS(load([&](Fp8Folder& f) { f.tensors[q + ".weight_scale_inv"] = full({2, 1}, 1.0); }),
                   "q_proj.weight_scale_inv' has shape [2, 1]", "wants [1, 1]", "128x128");
  EXPECT_ERROR_HAS(load([&](Fp8Folder& f) { f.tensors[q + ".weight_scale_inv"] = full({1, 1}, -2.0); }),
                   "q_proj.weight_scale_inv' holds -2 at [0, 0]", "finite and positive");
  EXPECT_ERROR_HAS(load([&](Fp8Folder& f) { f.tensors[q + ".weight_scale_inv"] = full({1, 1}, 1.0, {kBFloat16}); }),
                   "q_proj.weight_scale_inv' is BF16, wants F32");
  EXPECT_ERROR_HAS(load([&](Fp8Folder& f) { f.tensors[q + ".weight"] = zeros({32, 32}, {kBFloat16}); }),
                   "q_proj.weight' is BF16", "F8_E4M3");
  EXPECT_ERROR_HAS(load([&](Fp8Folder& f) {
                     f.tensors[q + ".weight"] = zeros({32, 32}, {kBFloat16});
                     f.tensors.erase(q + ".weight_scale_inv");
                   }),
                   "in FP8", "without a weight_scale_inv", "q_proj.weight'", "modules_to_not_convert");
  EXPECT_ERROR_HAS(load([&](Fp8Folder& f) { f.config.set("weight_block_size", json::Value::array({int64_t{64}, int64_t{64}})); }),
                   "weight_block_size", "[128, 128]");
  EXPECT_ERROR_HAS(load([&](Fp8Folder& f) { f.config.set("activation_scheme", "static"); }), "activation_scheme",
                   "dynamic");
  load({});
  EXPECT_ERROR_HAS(nn::from_pretrained(last, {.dtype = kBFloat16, .quantization = {.load_in_4bit = true}}),
                   "holds FP8 weights", "drop load_in_4bit");
}

// ---------------------------------------------------------------------------------------- GPU

Device gpu() { return Device::cuda(0); }

TEST(Fp8Gpu, KernelsGiveTheCpuBytes) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  Generator gen(11);
  for (Shape shape : {Shape{512, 1024}, Shape{300, 200}, Shape{7, 1000}}) {
    for (DType dt : {kFloat32, kBFloat16}) {
      SCOPED_TRACE(::testing::PrintToString(shape) + " " + dtype_name(dt));
      const Tensor w = to(mul(randn(shape, gen), 0.02), dt);
      for (Fp8Scaling s : {Fp8Scaling::Block128, Fp8Scaling::Row}) {
        const Fp8Weight cpu = quantize_fp8(w, s), cuda = quantize_fp8(to(w, gpu()), s);
        EXPECT_EQ(cuda.data.to_vector<uint8_t>(), cpu.data.to_vector<uint8_t>());
        EXPECT_EQ(cuda.scale_inv.to_vector<float>(), cpu.scale_inv.to_vector<float>());
        for (DType out : {kFloat32, kBFloat16})
          EXPECT_TENSOR_EQ(to(dequantize_fp8(cuda, out), Device::cpu()), dequantize_fp8(cpu, out));
      }
      for (int64_t tile : {128, 0}) {
        const Fp8Activation cpu = quantize_fp8_activation(w, tile), cuda = quantize_fp8_activation(to(w, gpu()), tile);
        EXPECT_EQ(cuda.data.to_vector<uint8_t>(), cpu.data.to_vector<uint8_t>());
        EXPECT_EQ(contiguous(cuda.scale).to_vector<float>(), contiguous(cpu.scale).to_vector<float>());
      }
    }
  }
  std::vector<float> v(300 * 200, 0.5f);
  v[123 * 200 + 45] = -std::numeric_limits<float>::infinity();
  EXPECT_ERROR_HAS(quantize_fp8(from_vector(v, {300, 200}, gpu())), "quantize_fp8", "-inf at [123, 45]");
}

// Relative Frobenius error of got against want.
double relative_error(const Tensor& got, const Tensor& want) {
  const Tensor d = sub(to(got, kFloat32), to(want, kFloat32));
  return std::sqrt(sum(mul(d, d)).item<double>() / sum(mul(to(want, kFloat32), to(want, kFloat32))).item<double>());
}

// The FP8 GEMMs (x and dy quantised per 1x128 tile) against the dequantised weight in bfloat16:
// within the activations' e4m3 rounding (relative error about 2.5% RMS), and the same against the
// CPU's dequantise-then-float32.
TEST(Fp8Gpu, Fp8GemmsMatchDequantiseThenBFloat16) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  Generator gen(12);
  // rows, out, in; the last with 5 and 3 blocks a row (scale rows padded to 4 for cuBLASLt)
  for (Shape s : {Shape{64, 512, 1024}, Shape{256, 1536, 512}, Shape{48, 384, 640}}) {
    SCOPED_TRACE(::testing::PrintToString(s));
    const Fp8Weight q = quantize_fp8(to(mul(randn({s[1], s[2]}, gen), 0.02), gpu()));
    Tensor x = to(to(randn({2, s[0] / 2, s[2]}, gen), kBFloat16), gpu()).requires_grad_(true);
    KernelTrace trace;
    Tensor y = linear_fp8(x, q);
    EXPECT_TRUE(trace.contains("linear_fp8.fp8_forward")) << trace.str();
    const Tensor g = to(to(randn(y.shape(), gen), kBFloat16), gpu());
    y.backward(g);
    EXPECT_TRUE(trace.contains("linear_fp8.fp8_dx")) << trace.str();
    const Tensor w = dequantize_fp8(q, kBFloat16);
    const Tensor y_ref = linear(x.detach(), w), dx_ref = matmul(g, w);
    EXPECT_LT(relative_error(y, y_ref), 0.04);
    EXPECT_LT(relative_error(x.grad(), dx_ref), 0.04);
    EXPECT_GT(relative_error(y, y_ref), 0.0);  // it did quantise the activations
    const Tensor y_cpu = linear(to(to(x.detach(), kFloat32), Device::cpu()), dequantize_fp8(q.to(Device::cpu()), kFloat32));
    EXPECT_LT(relative_error(to(y, Device::cpu()), y_cpu), 0.04);
  }
}

// LoRA over FP8 bases as one op (q / k / v of LoRALinear over LinearFp8, grouped as the models do):
// the outputs and every gradient within the FP8 GEMMs' rounding of the same LoRA over the
// dequantised weights in bfloat16, the FP8 GEMMs having run forward and for dx.
TEST(Fp8Gpu, LoraGroupOverFp8BasesMatchesTheDequantisedOne) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  Generator gen(14);
  std::vector<std::shared_ptr<nn::Linear>> fp8, dense;
  for (int64_t out : {512, 256, 256}) {
    const Fp8Weight q = quantize_fp8(to(mul(randn({out, 512}, gen), 0.02), gpu()));
    auto lora = [&](const nn::Linear& base) {
      auto l = std::make_shared<peft::LoRALinear>(base, 16, 32.0, 0.0, gen);
      copy_(l->lora_B->weight.detach(), to(mul(randn(l->lora_B->weight.shape(), gen), 0.05), gpu()));
      return l;
    };
    auto a = lora(nn::LinearFp8(q, Tensor(), kBFloat16));
    auto b = lora(nn::Linear(dequantize_fp8(q, kBFloat16)));
    copy_(b->lora_A->weight.detach(), a->lora_A->weight.detach());
    copy_(b->lora_B->weight.detach(), a->lora_B->weight.detach());
    fp8.push_back(a), dense.push_back(b);
  }
  const Tensor x0 = to(to(randn({128, 512}, gen), kBFloat16), gpu());
  Tensor x = x0.detach().requires_grad_(true), xr = x0.detach().requires_grad_(true);
  KernelTrace trace;
  const std::vector<Tensor> y = nn::forward_group(fp8, x), yr = nn::forward_group(dense, xr);
  EXPECT_TRUE(trace.contains("linear_fp8.fp8_forward")) << trace.str();
  const Tensor g = to(to(randn({128, 1024}, gen), kBFloat16), gpu());
  sum(mul(cat(y, -1), g)).backward();
  sum(mul(cat(yr, -1), g)).backward();
  EXPECT_TRUE(trace.contains("linear_fp8.fp8_dx")) << trace.str();
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_LT(relative_error(y[i], yr[i]), 0.04) << i;
    auto& a = dynamic_cast<peft::LoRALinear&>(*fp8[i]);
    auto& b = dynamic_cast<peft::LoRALinear&>(*dense[i]);
    EXPECT_LT(relative_error(a.lora_A->weight.grad(), b.lora_A->weight.grad()), 0.04) << i;
    EXPECT_LT(relative_error(a.lora_B->weight.grad(), b.lora_B->weight.grad()), 0.04) << i;
  }
  EXPECT_LT(relative_error(x.grad(), xr.grad()), 0.04);
}

// Shapes the FP8 GEMM does not take (not whole 512s, float32 x) dequantise, as on the CPU.
TEST(Fp8Gpu, OtherShapesDequantise) {
  if (!testing::cuda_ready()) GTEST_SKIP() << "no CUDA device (or tapegrad built without CUDA): GPU test skipped";
  Generator gen(13);
  const Fp8Weight q = quantize_fp8(to(mul(randn({300, 200}, gen), 0.02), gpu()));
  const Tensor x = to(randn({5, 200}, gen), gpu());
  KernelTrace trace;
  const Tensor y = linear_fp8(x, q);
  EXPECT_TRUE(trace.contains("linear_fp8.dequantized_forward"));
  EXPECT_TENSOR_NEAR(to(y, Device::cpu()), linear_fp8(to(x, Device::cpu()), q.to(Device::cpu())), 1e-4, 1e-5);
}

}  // namespace
}  // namespace tg::test
