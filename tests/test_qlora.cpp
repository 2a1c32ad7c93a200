// QLoRA with Hugging Face folders: from_pretrained quantising as it streams (bitwise what
// replace_with_4bit_linear gives, holding one dense layer at a time), bitsandbytes' 4-bit folder
// layout both ways and its errors, adapters trained on a 4-bit base in peft's format, and
// merge_and_unload on a 4-bit base.
#include <gtest/gtest.h>

#include <set>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/memory.h"
#include "core/primitives.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/init.h"
#include "nn/linear4bit.h"
#include "nn/models/detail/bnb_4bit.h"
#include "nn/models/pretrained.h"
#include "nn/models/quantization.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/shape.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/qlora_tiny_run.h"
#include "tests/test_models.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;

const nn::QuantizationConfig kNF4{.load_in_4bit = true, .quant_type = "nf4", .double_quant = true,
                                  .compute_dtype = kBFloat16};

json::Value read_json(const std::string& path) {
  std::vector<uint8_t> b = io::read_file(path);
  return json::parse(std::string(b.begin(), b.end()));
}

// Every tensor of both state dicts equal bitwise, under the same names.
void expect_same_state(const nn::Module& a, const nn::Module& b) {
  const nn::StateDict sa = a.state_dict(), sb = b.state_dict();
  std::vector<std::string> na, nb;
  for (const auto& [k, v] : sa) na.push_back(k);
  for (const auto& [k, v] : sb) nb.push_back(k);
  ASSERT_EQ(na, nb);
  for (const auto& [k, v] : sa) {
    SCOPED_TRACE(k);
    EXPECT_TENSOR_EQ(v, sb.at(k));
  }
}

int count_4bit(nn::Module& m) {
  int n = 0;
  for (auto& [path, sub] : m.named_modules()) n += dynamic_cast<nn::Linear4bit*>(sub) != nullptr;
  return n;
}

class QloraTest : public testing::SeededTest {
 protected:
  // A bf16 Llama folder (save_pretrained of a random model) in `dir`.
  void write_llama(const std::string& dir) {
    nn::LlamaForCausalLM model(llama_config(), gen);
    model.to(kBFloat16);
    nn::save_pretrained(model, dir);
  }
  TempDir tmp;
};

// Quantised while streaming == loaded dense, then replace_with_4bit_linear, bitwise; the host held
// the 4-bit model plus one layer's weight, never the dense model.
TEST_F(QloraTest, FromPretrainedQuantisesAsItStreams) {
  for (const std::string family : {"llama", "gpt2"}) {
    SCOPED_TRACE(family);
    const std::string dir = tmp / family;
    std::shared_ptr<nn::Module> source;
    if (family == "llama") source = std::make_shared<nn::LlamaForCausalLM>(llama_config(), gen);
    else source = std::make_shared<nn::GPT2LMHeadModel>(gpt2_config(), gen);
    source->to(kBFloat16);
    nn::save_pretrained(*source, dir);
    for (const nn::QuantizationConfig& q :
         {kNF4, nn::QuantizationConfig{.load_in_4bit = true, .quant_type = "fp4", .double_quant = false,
                                       .compute_dtype = kFloat32, .skip_modules = {}, .blocksize = 128}}) {
      SCOPED_TRACE(q.quant_type);
      reset_peak_memory_stats();
      const int64_t before = static_cast<int64_t>(memory_stats().bytes_in_use);
      const auto streamed = nn::from_pretrained(dir, {.dtype = kBFloat16, .quantization = q});
      const MemoryStats after = memory_stats();
      auto dense = nn::from_pretrained(dir, {.dtype = kBFloat16});
      int64_t largest = 0, linear_bytes = 0;
      for (const std::string& path : nn::linear_4bit_targets(*dense, q, "test")) {
        largest = std::max<int64_t>(largest, dense->get_parameter(path + ".weight").nbytes());
        linear_bytes += dense->get_parameter(path + ".weight").nbytes();
      }
      const std::vector<std::string> paths = nn::replace_with_4bit_linear(*dense, q);
      EXPECT_EQ(count_4bit(*streamed), static_cast<int>(paths.size()));
      expect_same_state(*streamed, *dense);
      EXPECT_TENSOR_EQ(streamed->forward(tiny_qlora_ids()), dense->forward(tiny_qlora_ids()));
      // The load's peak over what the model holds: one dense layer (twice for GPT-2's Conv1D, read
      // transposed through the file reader's buffer) and the quantiser's float32 absmax of it, far
      // below the dense linear layers a dense load would hold.
      // A host load in the files' dtype copies the files' tensors into memory of its own: a
      // parameter allocated and then given that memory counts in the peak but not in what is in
      // use after, so the model's own bytes are those of its storages, copied or not, beside what
      // was in use before the load.
      std::set<const Storage*> storages;
      int64_t held = 0;
      for (const auto& [name, t] : streamed->named_parameters())
        if (storages.insert(t.storage().get()).second) held += static_cast<int64_t>(t.storage()->nbytes());
      for (const auto& [name, t] : streamed->named_buffers())
        if (t.defined() && storages.insert(t.storage().get()).second) held += static_cast<int64_t>(t.storage()->nbytes());
      const int64_t extra = static_cast<int64_t>(after.peak_bytes) - before - held;
      const int64_t bound = (family == "gpt2" ? 2 : 1) * largest + largest / 4;
      EXPECT_LE(extra, bound);
      EXPECT_GT(linear_bytes, 2 * bound);
    }
  }
}

// A tied head quantised too (skip_modules empty): quantised from the loaded embedding, as
// replace_with_4bit_linear does, the embedding left dense.
TEST_F(QloraTest, TiedHeadQuantisesAfterTheEmbeddingLoads) {
  nn::GPT2LMHeadModel source(gpt2_config(), gen);
  nn::save_pretrained(source, tmp / "m");
  nn::QuantizationConfig q = kNF4;
  q.skip_modules = {};
  auto streamed = nn::from_pretrained(tmp / "m", {.quantization = q});
  auto dense = nn::from_pretrained(tmp / "m");
  nn::replace_with_4bit_linear(*dense, q);
  EXPECT_NE(dynamic_cast<nn::Linear4bit*>(streamed->get_submodule("lm_head").get()), nullptr);
  expect_same_state(*streamed, *dense);
}

// save_pretrained writes bitsandbytes' layout and config.json's quantization_config; the folder
// loads back bitwise (with no options: the folder says it is quantised).
TEST_F(QloraTest, SavedFourBitFolderRoundTrips) {
  write_llama(tmp / "dense");
  for (const bool double_quant : {true, false}) {
    SCOPED_TRACE(double_quant);
    nn::QuantizationConfig q = kNF4;
    q.double_quant = double_quant;
    auto model = nn::from_pretrained(tmp / "dense", {.dtype = kBFloat16, .quantization = q});
    const std::string dir = tmp / ("q" + std::to_string(double_quant));
    nn::save_pretrained(*model, dir);

    const json::Value qc = read_json(dir + "/config.json").at("quantization_config");
    EXPECT_EQ(qc.at("quant_method").as_string(), "bitsandbytes");
    EXPECT_TRUE(qc.at("load_in_4bit").as_bool());
    EXPECT_EQ(qc.at("bnb_4bit_quant_type").as_string(), "nf4");
    EXPECT_EQ(qc.at("bnb_4bit_use_double_quant").as_bool(), double_quant);
    EXPECT_EQ(qc.at("bnb_4bit_compute_dtype").as_string(), "bfloat16");
    EXPECT_EQ(qc.at("bnb_4bit_quant_storage").as_string(), "uint8");
    EXPECT_EQ(json::dump(qc.at("llm_int8_skip_modules")), "[\"lm_head\"]");
    const safetensors::Loaded file = safetensors::load_file_with_metadata(dir + "/model.safetensors");
    const std::string w = "model.layers.1.mlp.down_proj.weight";  // [32, 48]: 1536 values, 24 blocks
    EXPECT_EQ(file.tensors.at(w).dtype(), kUInt8);
    EXPECT_EQ(file.tensors.at(w).shape(), Shape({768, 1}));
    EXPECT_EQ(file.tensors.at(w + ".absmax").dtype(), double_quant ? kUInt8 : kFloat32);
    EXPECT_EQ(file.tensors.at(w + ".absmax").shape(), Shape({24}));
    EXPECT_EQ(file.tensors.at(w + ".quant_map").shape(), Shape({16}));
    EXPECT_EQ(file.tensors.count(w + ".nested_absmax"), double_quant ? 1u : 0u);
    const Tensor json_bytes = file.tensors.at(w + ".quant_state.bitsandbytes__nf4");
    const std::vector<uint8_t> text = json_bytes.to_vector<uint8_t>();
    const json::Value state = json::parse(std::string(text.begin(), text.end()));
    EXPECT_EQ(state.at("quant_type").as_string(), "nf4");
    EXPECT_EQ(state.at("blocksize").as_int(), 64);
    EXPECT_EQ(state.at("dtype").as_string(), "bfloat16");
    EXPECT_EQ(json::dump(state.at("shape")), "[32,48]");
    EXPECT_EQ(state.find("nested_offset") != nullptr, double_quant);
    if (double_quant) EXPECT_EQ(state.at("nested_blocksize").as_int(), 256);
    EXPECT_EQ(file.tensors.count("model.layers.1.mlp.down_proj.absmax"), 0u);  // tapegrad's names stay inside
    EXPECT_EQ(file.tensors.at("lm_head.weight").dtype(), kBFloat16);

    auto back = nn::from_pretrained(dir, {.dtype = kBFloat16});
    EXPECT_EQ(count_4bit(*back), 14);
    expect_same_state(*back, *model);
    EXPECT_TENSOR_EQ(back->forward(tiny_qlora_ids()), model->forward(tiny_qlora_ids()));
    // The caller's compute dtype wins over the folder's; the format is the folder's.
    nn::QuantizationConfig fp4 = kNF4;
    fp4.quant_type = "fp4";
    fp4.compute_dtype = kFloat32;
    auto f32 = nn::from_pretrained(dir, {.dtype = kBFloat16, .quantization = fp4});
    auto* layer = dynamic_cast<nn::Linear4bit*>(f32->get_submodule("model.layers.0.self_attn.q_proj").get());
    ASSERT_NE(layer, nullptr);
    EXPECT_EQ(layer->compute_dtype, kFloat32);
    EXPECT_EQ(layer->quant_state.quant_type, "nf4");
  }
}

// Rewrites the folder's model.safetensors through `change`.
void edit_weights(const std::string& dir, const std::function<void(safetensors::TensorMap&)>& change) {
  safetensors::Loaded f = safetensors::load_file_with_metadata(dir + "/model.safetensors");
  change(f.tensors);
  safetensors::save_file(f.tensors, dir + "/model.safetensors", f.metadata);
}

Tensor json_tensor(const std::string& text) {
  Tensor t = Tensor::empty({static_cast<int64_t>(text.size())}, {kUInt8});
  std::copy(text.begin(), text.end(), t.data_ptr<uint8_t>());
  return t;
}

// A 4-bit folder that does not fit together is a tg::Error naming the tensor (or field).
TEST_F(QloraTest, BadFourBitFoldersNameTheTensor) {
  write_llama(tmp / "dense");
  nn::save_pretrained(*nn::from_pretrained(tmp / "dense", {.dtype = kBFloat16, .quantization = kNF4}), tmp / "good");
  const std::string w = "model.layers.0.self_attn.q_proj.weight";  // [32, 32]: 1024 values, 16 blocks
  const std::string key_str = w + ".quant_state.bitsandbytes__nf4";
  const char* key = key_str.c_str();
  int n = 0;
  auto broken = [&](const std::function<void(safetensors::TensorMap&)>& change) {
    const std::string dir = tmp / ("bad" + std::to_string(n++));
    fs::copy(tmp / "good", dir);
    edit_weights(dir, change);
    return dir;
  };
  auto load = [](const std::string& dir) { nn::from_pretrained(dir); };
  const std::string packed_size = w + " (file [511, 1], config.json wants [512, 1])",
                    packed_dtype = w + " (file BF16, bitsandbytes' U8)", map_size = w + ".quant_map (file [15]",
                    absmax_size = w + ".absmax (file [15]";
  EXPECT_ERROR_HAS(load(broken([&](auto& t) { t[w] = zeros({511, 1}, {kUInt8}); })), "from_pretrained",
                   "wrong shape", packed_size.c_str());
  EXPECT_ERROR_HAS(load(broken([&](auto& t) { t[w] = zeros({512, 1}, {kBFloat16}); })), "wrong dtype",
                   packed_dtype.c_str());
  EXPECT_ERROR_HAS(load(broken([&](auto& t) { t[w + ".quant_map"] = zeros({15}); })), map_size.c_str(), "wants [16]");
  EXPECT_ERROR_HAS(load(broken([&](auto& t) { t[w + ".absmax"] = zeros({15}, {kUInt8}); })), absmax_size.c_str(),
                   "wants [16]");
  EXPECT_ERROR_HAS(load(broken([&](auto& t) { t.erase(w + ".nested_absmax"); })), "missing",
                   "model.layers.0.self_attn.q_proj.nested_absmax");
  const std::string good_state = R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [32, 32], )"
                                 R"("nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.01})";
  auto with_state = [&](std::string text) { return broken([&](auto& t) { t[key_str] = json_tensor(text); }); };
  EXPECT_NO_THROW(load(with_state(good_state)));
  EXPECT_ERROR_HAS(load(with_state(R"({"quant_type": "fp4", "blocksize": 64, "dtype": "bfloat16", "shape": [32, 32]})")),
                   key, "quant_type is \"fp4\"", "bitsandbytes__nf4");
  EXPECT_ERROR_HAS(load(with_state(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [32, 16], )"
                                   R"("nested_blocksize": 256, "nested_offset": 0.5})")),
                   key, "says shape [32, 16]", "[32, 32]");
  EXPECT_ERROR_HAS(load(with_state(R"({"quant_type": "nf4", "blocksize": 48, "dtype": "bfloat16", "shape": [32, 32]})")),
                   key, "blocksize is 48");
  EXPECT_ERROR_HAS(load(with_state(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [32, 32]})")),
                   key, "is nf4", "quantization_config says nf4 double-quantised");
  EXPECT_ERROR_HAS(load(with_state("not json")), key, "not bitsandbytes' quant_state JSON");
  EXPECT_ERROR_HAS(load(with_state(R"({"blocksize": 64})")), key, "has no quant_type");

  // config.json's quantization_config
  auto with_config = [&](const std::string& field, json::Value value) {
    const std::string dir = tmp / ("cfg" + std::to_string(n++));
    fs::copy(tmp / "good", dir);
    json::Value v = read_json(dir + "/config.json");
    json::Value q = v.at("quantization_config");
    q.set(field, std::move(value));
    v.set("quantization_config", q);
    io::write_file_atomic(dir + "/config.json", json::dump(v, 2));
    return dir;
  };
  EXPECT_ERROR_HAS(load(with_config("bnb_4bit_quant_storage", "bfloat16")), "bnb_4bit_quant_storage", "uint8");
  EXPECT_ERROR_HAS(load(with_config("quant_method", "gptq")), "quant_method", "gptq");
  EXPECT_ERROR_HAS(load(with_config("load_in_8bit", true)), "load_in_8bit", "LLM.int8()");
  EXPECT_ERROR_HAS(load(with_config("bnb_4bit_quant_type", "int4")), "bnb_4bit_quant_type", "nf4 or fp4");
}

// What a 4-bit folder holds that bitsandbytes never writes and the layers would dequantise into
// other weights without a word (a NaN, infinite or negative absmax, a quant_map that is not the
// code), and a config.json that disagrees with the files (a quantization_config over dense
// weights, 4-bit weights without one): each a tg::Error naming the tensor and its file.
TEST_F(QloraTest, FourBitValuesAndTheConfigAreCheckedAgainstTheFiles) {
  write_llama(tmp / "dense");
  for (const bool double_quant : {false, true}) {
    nn::QuantizationConfig q = kNF4;
    q.double_quant = double_quant;
    nn::save_pretrained(*nn::from_pretrained(tmp / "dense", {.dtype = kBFloat16, .quantization = q}),
                        tmp / ("good" + std::to_string(double_quant)));
  }
  const std::string w = "model.layers.0.self_attn.q_proj.weight", absmax = w + ".absmax", map = w + ".quant_map",
                    nested_absmax = w + ".nested_absmax", nested_map = w + ".nested_quant_map";
  int n = 0;
  auto copy = [&](const std::string& from) {
    const std::string dir = tmp / ("case" + std::to_string(n++));
    fs::copy(from, dir);
    return dir;
  };
  // The folder (double-quantised or not) with `key`'s float32 element i set to v.
  auto with_value = [&](bool double_quant, const std::string& key, int64_t i, float v) {
    const std::string dir = copy(tmp / ("good" + std::to_string(double_quant)));
    edit_weights(dir, [&](safetensors::TensorMap& t) {
      Tensor changed = clone(t.at(key));
      changed.data_ptr<float>()[i] = v;
      t[key] = changed;
    });
    return dir;
  };
  auto load = [](const std::string& dir) { nn::from_pretrained(dir); };
  for (const float v : {NAN, INFINITY, -0.5f})
    EXPECT_ERROR_HAS(load(with_value(false, absmax, 3, v)), "model.safetensors': '", absmax.c_str(), "at block 3",
                     "finite number >= 0");
  EXPECT_ERROR_HAS(load(with_value(true, nested_absmax, 0, INFINITY)), nested_absmax.c_str(), "at block 0");
  EXPECT_ERROR_HAS(load(with_value(false, map, 5, -0.17f)), map.c_str(), "at 5", "nf4 code has -0.18477");
  EXPECT_ERROR_HAS(load(with_value(true, map, 15, 2.0f)), map.c_str(), "at 15");
  EXPECT_ERROR_HAS(load(with_value(true, nested_map, 200, 7.0f)), nested_map.c_str(), "8-bit dynamic map");
  EXPECT_NO_THROW(load(tmp / "good0"));
  EXPECT_NO_THROW(load(tmp / "good1"));

  auto with_config = [&](const std::string& from, const std::function<void(json::Value&)>& change) {
    const std::string dir = copy(from);
    json::Value v = read_json(dir + "/config.json");
    change(v);
    io::write_file_atomic(dir + "/config.json", json::dump(v, 2));
    return dir;
  };
  const json::Value quantization = read_json(tmp / "good1/config.json").at("quantization_config");
  const std::string dense_q = "'" + w + "' in '";
  EXPECT_ERROR_HAS(load(with_config(tmp / "dense", [&](json::Value& v) { v.set("quantization_config", quantization); })),
                   "quantization_config stores every Linear but llm_int8_skip_modules (lm_head) in 4 bits",
                   "14 of them dense", dense_q.c_str(), "model.safetensors");
  EXPECT_ERROR_HAS(load(with_config(tmp / "good1", [](json::Value& v) { v.set("quantization_config", json::Value()); })),
                   "model.safetensors' holds 'model.layers.", ".quant_state.bitsandbytes__nf4', bitsandbytes' 4-bit state",
                   "has no quantization_config");
  // By name: a layer the folder keeps dense is one its llm_int8_skip_modules lists.
  nn::QuantizationConfig keep_q = kNF4;
  keep_q.skip_modules = {"lm_head", "model.layers.1.self_attn.q_proj"};
  nn::save_pretrained(*nn::from_pretrained(tmp / "dense", {.dtype = kBFloat16, .quantization = keep_q}),
                      tmp / "kept");
  EXPECT_EQ(count_4bit(*nn::from_pretrained(tmp / "kept")), 13);
  EXPECT_ERROR_HAS(load(with_config(tmp / "kept",
                                    [](json::Value& v) {
                                      json::Value q = v.at("quantization_config");
                                      q.set("llm_int8_skip_modules", json::parse(R"(["lm_head"])"));
                                      v.set("quantization_config", q);
                                    })),
                   "1 of them dense", "'model.layers.1.self_attn.q_proj.weight' in '");
}

// LoRA on the 4-bit base saves the adapter a bf16 base would: the same peft files (names, shapes,
// dtypes, adapter_config.json), and it loads onto the dense base.
TEST_F(QloraTest, AdapterOnAFourBitBaseIsAPeftAdapter) {
  write_llama(tmp / "dense");
  auto quantised = nn::from_pretrained(tmp / "dense", {.dtype = kBFloat16, .quantization = kNF4});
  auto dense = nn::from_pretrained(tmp / "dense", {.dtype = kBFloat16});
  peft::LoraConfig lc;
  lc.target_modules = {"q_proj", "v_proj", "down_proj"};
  Generator g1(7), g2(7);
  peft::apply_lora(*quantised, lc, g1);
  peft::apply_lora(*dense, lc, g2);
  peft::save_adapter(*quantised, tmp / "a4", lc);
  peft::save_adapter(*dense, tmp / "a16", lc);
  EXPECT_EQ(io::read_file(tmp / "a4/adapter_config.json"), io::read_file(tmp / "a16/adapter_config.json"));
  const safetensors::TensorMap a4 = safetensors::load_file(tmp / "a4/adapter_model.safetensors");
  const safetensors::TensorMap a16 = safetensors::load_file(tmp / "a16/adapter_model.safetensors");
  ASSERT_EQ(a4.size(), a16.size());
  for (const auto& [k, v] : a16) {
    ASSERT_TRUE(a4.count(k)) << k;
    EXPECT_TENSOR_EQ(a4.at(k), v);  // same init (the same generator), same dtype
  }
  EXPECT_EQ(a4.size(), 12u);
  // peft counts a 4-bit weight's values: the same line as on the bf16 base
  EXPECT_EQ(peft::trainable_parameters_line(*quantised), peft::trainable_parameters_line(*dense));
  EXPECT_EQ(a4.at("base_model.model.model.layers.0.mlp.down_proj.lora_A.weight").dtype(), kFloat32);
  auto fresh = nn::from_pretrained(tmp / "dense", {.dtype = kBFloat16});
  EXPECT_NO_THROW(peft::load_adapter(*fresh, tmp / "a4"));
}

// merge_and_unload on a 4-bit base: dense Linear layers in the compute dtype holding
// round(dequantised + scaling B A), said once on stderr; the untargeted layers dequantised.
TEST_F(QloraTest, MergeAndUnloadDequantises) {
  write_llama(tmp / "dense");
  auto model = nn::from_pretrained(tmp / "dense", {.dtype = kBFloat16, .quantization = kNF4});
  peft::LoraConfig lc;
  lc.target_modules = {"q_proj", "v_proj"};
  peft::apply_lora(*model, lc, gen);
  Tensor want;
  for (auto& [path, l] : peft::lora_layers(*model)) {
    nn::init::normal_(l->lora_B->weight, 0.0, 0.1, gen);
    if (path == "model.layers.1.self_attn.v_proj")
      want = tg::to(add(tg::to(l->quantized_base->dequantized_weight(kBFloat16), kFloat32), l->delta_weight()),
                    kBFloat16);
  }
  const Tensor before = model->forward(tiny_qlora_ids());
  const Tensor dequantised_down = dynamic_cast<nn::Linear4bit*>(model->get_submodule("model.layers.0.mlp.down_proj").get())
                                      ->dequantized_weight(kBFloat16);
  ::testing::internal::CaptureStderr();
  peft::merge_and_unload(*model);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("dequantised to bfloat16"), std::string::npos) << said;
  EXPECT_EQ(said.find("merge_and_unload"), said.rfind("merge_and_unload")) << "said more than once: " << said;
  EXPECT_TRUE(peft::lora_layers(*model).empty());
  auto v = std::dynamic_pointer_cast<nn::Linear>(model->get_submodule("model.layers.1.self_attn.v_proj"));
  ASSERT_TRUE(v && v->is_plain());
  EXPECT_TENSOR_EQ(v->weight, want);
  EXPECT_EQ(count_4bit(*model), 0);  // the layers without LoRA dequantised too
  auto down = std::dynamic_pointer_cast<nn::Linear>(model->get_submodule("model.layers.0.mlp.down_proj"));
  ASSERT_TRUE(down && down->is_plain());
  EXPECT_TENSOR_EQ(down->weight, dequantised_down);
  EXPECT_TENSOR_NEAR(tg::to(model->forward(tiny_qlora_ids()), kFloat32), tg::to(before, kFloat32), 0.05, 0.02);
}

const fs::path kQloraFixtures = fs::path(TG_TESTS_DIR) / "fixtures" / "qlora";
const std::string kTinyBase = (fs::path(TG_TESTS_DIR) / "fixtures" / "hf" / "llama").string();

// The tiny QLoRA run learns (its loss falls to under half) and still trains the committed
// adapter that tests/fixtures/qlora/make_fixtures.py gave peft.
TEST(QloraFixture, TinyRunTrainsTheCommittedAdapter) {
  const TinyQloraRun run = tiny_qlora_run(kTinyBase);
  EXPECT_LT(run.losses.back(), 0.5 * run.losses.front()) << run.losses.front() << " -> " << run.losses.back();
  const safetensors::TensorMap committed = safetensors::load_file((kQloraFixtures / "adapter" / "adapter_model.safetensors").string());
  std::map<std::string, Tensor> trained;
  for (auto& [path, l] : peft::lora_layers(*run.model)) {
    trained["base_model.model." + path + ".lora_A.weight"] = l->lora_A->weight;
    trained["base_model.model." + path + ".lora_B.weight"] = l->lora_B->weight;
  }
  ASSERT_EQ(trained.size(), committed.size());
  for (const auto& [key, t] : committed) {
    ASSERT_TRUE(trained.count(key)) << key;
    EXPECT_TENSOR_NEAR(trained.at(key), t, 1e-4, 1e-4) << key;
  }
}

// peft, given the adapter and the base dequantised by the reference, computes the logits tapegrad
// computes with the adapter on the 4-bit base (whose dequantised weights are the reference's, bit
// for bit).
TEST(QloraFixture, AdapterMatchesPeftOnTheDequantisedBase) {
  const fs::path expected_path = kQloraFixtures / "expected.safetensors";
  if (!fs::exists(expected_path))
    GTEST_SKIP() << expected_path << " is not written yet: python3 tests/fixtures/qlora/make_fixtures.py (torch, "
                 << "transformers, peft) writes it";
  const safetensors::TensorMap expected = safetensors::load_file(expected_path.string());
  auto model = nn::from_pretrained(kTinyBase, {.dtype = kFloat32, .quantization = kTinyQloraQuantization});
  peft::load_adapter(*model, (kQloraFixtures / "adapter").string());
  int dequantised = 0;
  for (const auto& [key, want] : expected) {
    if (!key.starts_with("deq.")) continue;
    const std::string layer = key.substr(4, key.size() - 4 - 7);  // "deq.<layer>.weight"
    const auto* l = dynamic_cast<peft::LoRALinear*>(model->get_submodule(layer).get());
    const auto* q = l ? l->quantized_base.get() : dynamic_cast<nn::Linear4bit*>(model->get_submodule(layer).get());
    ASSERT_NE(q, nullptr) << layer;
    EXPECT_TENSOR_EQ(q->dequantized_weight(kFloat32), want) << layer;
    ++dequantised;
  }
  EXPECT_EQ(dequantised, 14);
  const Tensor ids = expected.at("ids");
  EXPECT_TENSOR_EQ(ids, tiny_qlora_ids());
  EXPECT_TENSOR_NEAR(model->forward(ids), expected.at("logits"), 1e-4, 1e-4);
  EXPECT_NEAR(model->loss(ids, ids).item(), expected.at("loss").item(), 1e-5);
}

}  // namespace
}  // namespace tg::test
