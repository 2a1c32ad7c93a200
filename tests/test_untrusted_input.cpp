// Hostile or careless input (issue 24, findings 2-4 and 6-8): configs whose numbers crash or
// overflow, shapes whose sizes overflow, adapters that do not fit, JSON built to be slow, and
// the undefined behaviour UBSan found. Each is a tg::Error naming what was wrong, or just works.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>

#include "core/factory.h"
#include "core/memory.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/nn.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_models.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

// What from_pretrained says of a folder holding only this config.json (the config is checked
// before any weight is looked for).
std::string config_error(const std::string& config_json) {
  TempDir dir;
  io::write_file_atomic(dir / "config.json", config_json);
  return error_of([&] { nn::from_pretrained(dir.str()); });
}

#define EXPECT_CONFIG_ERROR_HAS(text, ...)                                                     \
  do {                                                                                        \
    const std::string tg_cfg_msg = config_error(text);                                        \
    for (const char* tg_part : {__VA_ARGS__})                                                 \
      EXPECT_NE(tg_cfg_msg.find(tg_part), std::string::npos) << "message: " << tg_cfg_msg     \
                                                             << "\nmissing: " << tg_part;     \
  } while (0)

// A small Llama config.json with `field` set to the JSON `value`.
std::string llama_with(const std::string& field, const std::string& value) {
  json::Value v = json::parse(R"({"model_type": "llama", "vocab_size": 32, "hidden_size": 8, "intermediate_size": 16,
                                  "num_hidden_layers": 1, "num_attention_heads": 2})");
  return json::dump(v.set(field, json::parse(value)));
}

// Finding 2: nn/models/pretrained.cpp divided by num_attention_heads (-1: INT64_MIN / -1) before
// validating, and head_dim * num_attention_heads overflowed.
TEST(UntrustedConfig, TheIssuesSigfpeConfigIsAnError) {
  EXPECT_CONFIG_ERROR_HAS(
                       R"({"model_type":"llama","hidden_size":-9223372036854775808,"num_attention_heads":-1,"head_dim":1})",
                   "hidden_size is -9223372036854775808", "wants an integer in [1, ");
  EXPECT_CONFIG_ERROR_HAS(R"({"model_type":"llama","hidden_size":4096,"num_attention_heads":4,
                                               "head_dim":4611686018427387904})",
                   "head_dim is 4611686018427387904");
  EXPECT_CONFIG_ERROR_HAS(llama_with("num_attention_heads", "-1"), "num_attention_heads is -1");
}

TEST(UntrustedConfig, EveryNumericFieldIsRangeCheckedByName) {
  for (const auto& [field, range] : {std::pair{"vocab_size", "[1, 2147483647]"}, {"hidden_size", "[1, 2147483647]"},
                                     {"intermediate_size", "[1, 2147483647]"}, {"num_hidden_layers", "[1, 1024]"},
                                     {"num_attention_heads", "[1, 2147483647]"},
                                     {"max_position_embeddings", "[1, 16777216]"}})
    for (const char* value : {"0", "-3", "1099511627776", "2.5", "\"8\"", "true"}) {
      SCOPED_TRACE(std::string(field) + " = " + value);
      const std::string wants = std::string("wants an integer in ") + range;
      EXPECT_CONFIG_ERROR_HAS(llama_with(field, value), field, wants.c_str());
    }
  for (const char* field : {"num_key_value_heads", "head_dim"})
    EXPECT_CONFIG_ERROR_HAS(llama_with(field, "-1"), field, "wants an integer in [0, ");
  for (const char* field : {"rms_norm_eps", "initializer_range"})
    EXPECT_CONFIG_ERROR_HAS(llama_with(field, "-1e-6"), field, "wants a finite number in [0.0, inf]");
  EXPECT_CONFIG_ERROR_HAS(llama_with("rope_theta", "0"), "rope_theta");
  EXPECT_CONFIG_ERROR_HAS(llama_with("rope_parameters", R"({"rope_type": "default", "rope_theta": -1})"),
                   "rope_parameters.rope_theta is -1");
  EXPECT_CONFIG_ERROR_HAS(llama_with("attention_dropout", "1.5"), "attention_dropout");
  const std::string gpt2 = R"({"model_type": "gpt2", "n_embd": 8, "n_head": 2, )";
  for (const char* field : {"embd_pdrop", "attn_pdrop", "resid_pdrop"}) {
    EXPECT_CONFIG_ERROR_HAS(gpt2 + "\"" + field + "\": 2}", field, "wants a finite number in [0.0, 1.0]");
    // libFuzzer: 1 passed the parser and failed in the attention kernel at the first forward.
    EXPECT_CONFIG_ERROR_HAS(gpt2 + "\"" + field + "\": 1.0}", field, "wants a probability in [0, 1)");
  }
  for (const char* field : {"vocab_size", "n_positions", "n_layer", "n_head", "n_embd"})
    EXPECT_CONFIG_ERROR_HAS(R"({"model_type": "gpt2", ")" + std::string(field) + "\": -2}", field);
  EXPECT_CONFIG_ERROR_HAS(gpt2 + R"("n_inner": -1})", "n_inner");

}

// Issue 47: counts that size what the model allocates (the RoPE tables hold every position, a
// module per layer) are bounded by name before anything is allocated; before, a
// max_position_embeddings of 2^31 went on to build tables of terabytes (std::bad_alloc).
TEST(UntrustedConfig, ContextAndLayerCountsAreBoundedBeforeAnythingIsAllocated) {
  EXPECT_CONFIG_ERROR_HAS(llama_with("max_position_embeddings", "2147483647"),
                          "max_position_embeddings is 2147483647, wants an integer in [1, 16777216]");
  EXPECT_CONFIG_ERROR_HAS(llama_with("num_hidden_layers", "100000000"),
                          "num_hidden_layers is 100000000, wants an integer in [1, 1024]");
  EXPECT_CONFIG_ERROR_HAS(R"({"model_type": "gpt2", "n_positions": 2147483647})", "n_positions is 2147483647",
                          "[1, 16777216]");
  EXPECT_CONFIG_ERROR_HAS(R"({"model_type": "gpt2", "n_layer": 5000})", "n_layer is 5000", "[1, 1024]");
  // Within the bounds, tables too large for the host are refused before they are made.
  const std::string huge_tables = json::dump(json::parse(llama_with("head_dim", "1048576"))
                                                 .set("max_position_embeddings", int64_t{1} << 24));
  EXPECT_CONFIG_ERROR_HAS(huge_tables, "the cos and sin tables of 16777216 positions x 1048576 rotary dims",
                          "more than the host's");
  // A config built in C++ is held to the same bounds.
  nn::LlamaConfig c = nn::LlamaConfig::tiny();
  c.max_position_embeddings = int64_t{1} << 31;
  EXPECT_ERROR_HAS(nn::LlamaForCausalLM{c}, "max_position_embeddings 2147483648 is above 16777216");
  c = nn::LlamaConfig::tiny();
  c.num_hidden_layers = 1 << 20;
  EXPECT_ERROR_HAS(nn::LlamaForCausalLM{c}, "num_hidden_layers 1048576 is above 1024");
  nn::GPT2Config g = nn::GPT2Config::tiny();
  g.n_positions = int64_t{1} << 30;
  EXPECT_ERROR_HAS(nn::GPT2LMHeadModel{g}, "n_positions 1073741824 is above 16777216");
}

// Issue 47: RoPE parameters whose tables transformers' formulas make non-finite (a division by
// zero, a log of 0, float32 overflow) are refused as config.json is read, naming the field and
// its value. Before, each loaded and its logits were NaN.
TEST(UntrustedConfig, RopeParametersThatMakeTheTablesNonFiniteAreNamed) {
  auto rope = [](const std::string& parameters) { return llama_with("rope_parameters", parameters); };
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "default", "rope_theta": 1})"), "rope_theta must be a finite number above 1, got 1");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "default", "rope_theta": 1e-300})"), "rope_theta", "1e-300");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "yarn", "factor": 4, "beta_fast": 2, "beta_slow": 2})"),
                          "beta_fast 2 and beta_slow 2");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "yarn", "factor": 4, "beta_fast": 1, "beta_slow": 32})"),
                          "0 < beta_slow < beta_fast", "beta_fast 1 and beta_slow 32");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "yarn", "original_max_position_embeddings": 4096})") ,
                          "max_position_embeddings / original_max_position_embeddings = 2048 / 4096", "must be >= 1");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "yarn", "factor": 4, "mscale": 1e308, "mscale_all_dim": 1})"),
                          "mscale 1e+308", "cos and sin scale by inf");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "yarn", "factor": 4, "attention_factor": 1e300})"),
                          "attention_factor 1e+300");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 2, "high_freq_factor": 2})"),
                          "low_freq_factor 2 and high_freq_factor 2");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "longrope", "original_max_position_embeddings": 1024, )"
                               R"("short_factor": [1, 1e-300], "long_factor": [1, 2]})"),
                          "short_factor holds 1e-300");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "longrope", "original_max_position_embeddings": 1024, )"
                               R"("short_factor": [1, 1], "long_factor": [1, 2, 3]})"),
                          "long_factor has 3 numbers", "2 (int(head_dim 4");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "longrope", "original_max_position_embeddings": 1, )"
                               R"("short_factor": [1, 1], "long_factor": [1, 2]})"),
                          "log(original_max_position_embeddings)", "at least 2, got 1");
  EXPECT_CONFIG_ERROR_HAS(rope(R"({"rope_type": "longrope", "original_max_position_embeddings": 1e300, )"
                               R"("short_factor": [1, 1], "long_factor": [1, 2]})"),
                          "original_max_position_embeddings is 1e+300");
  const std::string two_dims = json::dump(json::parse(rope(R"({"rope_type": "dynamic", "factor": 2})")).set("hidden_size", 4));
  EXPECT_CONFIG_ERROR_HAS(two_dims, "dynamic scales rope_theta by a power dim / (dim - 2)", "= 2, must be above 2");
}

TEST(UntrustedConfig, ParsePretrainedConfigChecksAsFromPretrainedDoes) {
  const auto c = std::any_cast<nn::LlamaConfig>(nn::parse_pretrained_config(llama_with("num_key_value_heads", "1")).config);
  EXPECT_EQ(c.vocab_size, 32);
  EXPECT_EQ(c.kv_heads(), 1);
  const std::string gpt2 = R"({"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_inner": null})";
  EXPECT_EQ(std::any_cast<nn::GPT2Config>(nn::parse_pretrained_config(gpt2).config).inner(), 32);
  EXPECT_ERROR_HAS(nn::parse_pretrained_config(llama_with("head_dim", "-4"), "my.json"), "'my.json'", "head_dim is -4");
}

// Finding 3: zeros({2^62 + 1, 4}) had numel 4 and 16 bytes of storage.
TEST(UntrustedShapes, SizeArithmeticThatOverflowsIsAnError) {
  const int64_t big = int64_t{1} << 62;
  EXPECT_ERROR_HAS(zeros({big + 1, 4}), "more than 2^63 elements");
  EXPECT_ERROR_HAS(zeros({big, 1}, {kFloat64}), "more than 2^63 bytes");
  EXPECT_ERROR_HAS(zeros({0, big, big}), "strides overflow");  // no elements, but views would overflow
  EXPECT_ERROR_HAS(numel_of({-1, 4}), "negative size");
  EXPECT_ERROR_HAS(randn({int64_t{1} << 40, int64_t{1} << 24}), "more than 2^63 elements");  // vocab x hidden
  EXPECT_ERROR_HAS(randn({int64_t{1} << 40, int64_t{1} << 22}), "more than 2^63 bytes");
  EXPECT_ERROR_HAS(arange(0, 1e30), "arange", "more than a tensor can hold");
  EXPECT_ERROR_HAS(arange(0, 1, 1e-300), "arange");
  EXPECT_ERROR_HAS(arange(1e30, 1e30 + 1e16, 1e16), "arange", "do not fit dtype int64");  // a cast to int64
  EXPECT_ERROR_HAS(full({2}, 1e300, {.dtype = kInt64}), "fill_", "does not fit");
  EXPECT_ERROR_HAS(full({2}, NAN, {.dtype = kInt32}), "fill_", "does not fit");
  EXPECT_EQ(full({1}, -2147483648.0, {.dtype = kInt32}).item<int32_t>(), INT32_MIN);

  Tensor t = zeros({4, 4});
  EXPECT_ERROR_HAS(t.as_strided({2, 2}, {big, 1}, 0), "reaches outside its storage");
  EXPECT_ERROR_HAS(t.as_strided({3, 3}, {-1, 1}, 4), "reaches outside its storage");
  EXPECT_ERROR_HAS(t.as_strided({2}, {1}, INT64_MAX), "reaches outside its storage");
  EXPECT_EQ(t.as_strided({2, 2}, {4, 1}, 10).numel(), 4);

  // The full int64 range of randint (high - low overflowed int64).
  Generator gen(3);
  Tensor r = randint(INT64_MIN, INT64_MAX, {64}, gen);
  EXPECT_EQ(r.numel(), 64);
}

TEST(UntrustedShapes, FromFilesTheyAreErrorsNamingTheField) {
  EXPECT_CONFIG_ERROR_HAS(llama_with("vocab_size", "1099511627776"), "vocab_size");
  EXPECT_ERROR_HAS(peft::parse_adapter_config(
                       R"({"peft_type": "LORA", "r": 4611686018427387904, "lora_alpha": 8, "target_modules": ["q_proj"]})"),
                   "r is 4611686018427387904", "wants an integer in [1, 2147483647]");
  // A safetensors header whose shape overflows.
  const std::string h = R"({"w": {"dtype": "F32", "shape": [4611686018427387905, 4], "data_offsets": [0, 16]}})";
  std::vector<uint8_t> file(8 + h.size());
  file[0] = static_cast<uint8_t>(h.size());
  std::copy(h.begin(), h.end(), file.begin() + 8);
  file.resize(file.size() + 16);
  EXPECT_ERROR_HAS(safetensors::deserialize(file.data(), file.size()), "shape is too large");
}

// Finding 7 (libFuzzer): an alpha beyond int64 went through a float -> int cast.
TEST(UntrustedAdapterConfig, HugeAlphaWritesAsANumber) {
  const peft::LoraConfig c = peft::parse_adapter_config(
      R"({"lora_alpha":9223372368547758089,"peft_type":"LORA","r":4,"target_modules":["v_proj"]})");
  EXPECT_EQ(c.lora_alpha, 9223372368547758089.0);
  const json::Value back = json::parse(peft::adapter_config_json(c));
  EXPECT_EQ(back.at("lora_alpha").as_double(), c.lora_alpha);
  peft::LoraConfig integral;
  integral.lora_alpha = 16;
  EXPECT_TRUE(json::parse(peft::adapter_config_json(integral)).at("lora_alpha").is_int());
  for (const char* bad : {R"("lora_alpha": 1e999)", R"("lora_alpha": 8, "lora_dropout": -0.5)",
                          R"("lora_alpha": 8, "lora_dropout": 2)", R"("lora_alpha": "8")"})
    EXPECT_THROW(peft::parse_adapter_config(R"({"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"], )" +
                                            std::string(bad) + "}"),
                 Error)
        << bad;
}

Tensor ids() { return from_vector<int64_t>({1, 5, 2, 12}, {1, 4}); }

class AdapterLoadTest : public testing::SeededTest {
 protected:
  // An adapter folder with r 2, lora_alpha `alpha` on q/v_proj, and non-zero B.
  std::string saved_adapter(const TempDir& dir, double alpha, const std::string& name = "adapter") {
    nn::LlamaForCausalLM m(test::micro_llama(), gen);
    peft::LoraConfig c;
    c.r = 2;
    c.lora_alpha = alpha;
    c.target_modules = {"q_proj", "v_proj"};
    peft::apply_lora(m, c, gen);
    for (auto& [path, l] : peft::lora_layers(m)) nn::init::normal_(l->lora_B->weight, 0.0, 0.5, gen);
    peft::save_adapter(m, dir / name, c);
    return dir / name;
  }
};

// Finding 4: into a model wrapped with another lora_alpha the load went through and kept the old
// scaling; a load that failed left the model wrapped, so the right adapter then failed too.
TEST_F(AdapterLoadTest, AnotherWrappingIsRefusedAndTheModelLeftAsItWas) {
  TempDir dir;
  const std::string a16 = saved_adapter(dir, 16, "a16"), a4 = saved_adapter(dir, 4, "a4");
  nn::LlamaForCausalLM model(test::micro_llama(), gen);
  peft::load_adapter(model, a4, gen);
  const Tensor before = model.forward(ids());
  EXPECT_ERROR_HAS(peft::load_adapter(model, a16, gen), "has r 2 lora_alpha 16", "wrapped with r 2 lora_alpha 4");
  EXPECT_TENSOR_EQ(model.forward(ids()), before);
  peft::merge(model);  // W holds the adapter: loading another into A and B would change nothing
  EXPECT_ERROR_HAS(peft::load_adapter(model, a4, gen), "is merged: unmerge the model");
  peft::LoraConfig other_targets;
  other_targets.r = 2;
  other_targets.lora_alpha = 4;
  other_targets.target_modules = {"q_proj", "k_proj"};
  nn::LlamaForCausalLM k_model(test::micro_llama(), gen);
  peft::apply_lora(k_model, other_targets, gen);
  EXPECT_ERROR_HAS(peft::load_adapter(k_model, a4, gen), "targets [model.layers.0.self_attn.q_proj, "
                   "model.layers.0.self_attn.v_proj]", "wrapped at [model.layers.0.self_attn.q_proj, "
                   "model.layers.0.self_attn.k_proj]");
}

TEST_F(AdapterLoadTest, AFailedLoadLeavesTheModelUnwrapped) {
  TempDir dir;
  const std::string good = saved_adapter(dir, 16, "good");
  const std::string bad = saved_adapter(dir, 16, "bad");
  auto tensors = safetensors::load_file(bad + "/adapter_model.safetensors");
  tensors.erase(tensors.begin());
  safetensors::save_file(tensors, bad + "/adapter_model.safetensors");

  nn::LlamaForCausalLM model(test::micro_llama(), gen), reference(test::micro_llama(), gen);
  reference.load_state_dict(model.state_dict());
  const Tensor before = model.forward(ids());
  EXPECT_ERROR_HAS(peft::load_adapter(model, bad, gen), "missing keys (1)", "the model is left unchanged");
  EXPECT_TRUE(peft::lora_layers(model).empty());
  EXPECT_TRUE(model.named_trainable_parameters().size() == reference.named_trainable_parameters().size());
  EXPECT_TENSOR_EQ(model.forward(ids()), before);
  peft::load_adapter(model, good, gen);  // the right one now loads
  peft::load_adapter(reference, good, gen);
  EXPECT_TENSOR_EQ(model.forward(ids()), reference.forward(ids()));
  EXPECT_ERROR_HAS(peft::load_adapter(model, dir / "nowhere", gen), "no adapter folder");
}

// Finding 6: every key of a parsed object was looked up in a list (80k keys: 22-50 s).
TEST(UntrustedJson, ObjectsParseInLinearTime) {
  constexpr int kKeys = 100000;
  std::string text = "{";
  for (int i = 0; i < kKeys; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  const auto t0 = std::chrono::steady_clock::now();
  const json::Value v = json::parse(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(v.size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(v.at("k" + std::to_string(kKeys - 1)).as_int(), kKeys - 1);
  // About 0.1 s here (0.5 s under ASan); the quadratic parser took over a minute.
  EXPECT_LT(seconds, 5.0) << kKeys << " keys";
  EXPECT_ERROR_HAS(json::parse(R"({"a": 1, "b": 2, "a": 3})"), "duplicate key \"a\"");
  json::Value o = json::Value::object();
  for (int i = 0; i < 40; ++i) o.set("k" + std::to_string(i), i);
  o.set("k7", "seven");  // replaces, indexed or not
  EXPECT_EQ(o.size(), 40u);
  EXPECT_EQ(o.at("k7").as_string(), "seven");
  EXPECT_EQ(o.keys()[7], "k7");
}

// Finding 8: zero-element tensors memcpy'd from a null pointer (UBSan, in the sanitizer suite).
TEST(UntrustedShapes, ZeroElementTensorsCopyNothing) {
  EXPECT_TRUE(zeros({0, 3}).to_vector<float>().empty());
  EXPECT_EQ(from_vector<float>({}, {0, 2}).numel(), 0);
  const auto bytes = safetensors::serialize({{"e", zeros({0})}});
  EXPECT_EQ(safetensors::deserialize(bytes.data(), bytes.size()).tensors.at("e").numel(), 0);
}

}  // namespace
}  // namespace tg::test
