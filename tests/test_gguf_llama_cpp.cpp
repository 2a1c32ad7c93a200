// GGUF files checked by llama.cpp itself (node-llama-cpp's prebuilt CPU build, installed by
// scripts/install-llama-cpp.sh; tests/gguf/llama_cpp.mjs runs it): each family's exported model
// loads, llama.cpp's greedy tokens equal nn::generate's and its probabilities tapegrad's, a LoRA
// adapter applied by llama.cpp gives the merged model's tokens, llama.cpp tokenizes as the
// tokenizer does and reads the folder's chat template. Without llama.cpp they fail, naming the
// script that installs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/factory.h"
#include "data/gguf_vocab.h"
#include "data/tokenizer.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/generation/generation.h"
#include "nn/models/gguf.h"
#include "nn/models/pretrained.h"
#include "ops/softmax.h"
#include "ops/unary.h"
#include "core/primitives.h"
#include "core/autograd.h"
#include "peft/gguf.h"
#include "peft/lora.h"
#include "test_support.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

const std::string kTests = TG_TESTS_DIR;

// Where scripts/install-llama-cpp.sh put node-llama-cpp; "" when it is not there.
std::string llama_cpp_dir() {
  const char* set = std::getenv("TG_LLAMA_CPP_DIR");
  const char* home = std::getenv("HOME");
  const std::string dir = set ? set : std::string(home ? home : "/root") + "/.cache/tapegrad/node-llama-cpp-3.21.1";
  return fs::exists(dir + "/node_modules/node-llama-cpp/package.json") ? dir : "";
}

// llama.cpp is the reference of these tests: without it they fail (make test and .ci/run install it).
#define REQUIRE_LLAMA_CPP()                                                                              \
  do {                                                                                                   \
    if (llama_cpp_dir().empty())                                                                         \
      FAIL() << "llama.cpp (node-llama-cpp) is not installed: run scripts/install-llama-cpp.sh (make test " \
                "runs it)";                                                                              \
  } while (0)

std::string read_text(const std::string& path) {
  const std::vector<uint8_t> b = io::read_file(path);
  return std::string(b.begin(), b.end());
}

// tests/gguf/llama_cpp.mjs on `runs` (one llama.cpp process for them all); its answer to each.
std::vector<json::Value> run_llama_cpp(const test::TempDir& dir, const std::vector<json::Value>& runs) {
  const std::string request_path = dir / "request.json", answer_path = dir / "answer.json";
  io::write_file_atomic(request_path, json::dump(json::Value::object().set("runs", json::Value::array(runs))));
  const std::string command = "node '" + kTests + "/gguf/llama_cpp.mjs' '" + llama_cpp_dir() + "' '" + request_path +
                              "' > '" + answer_path + "' 2> '" + dir / "llama_cpp.log" + "'";
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    ADD_FAILURE() << command << " exited " << rc << ":\n" << read_text(dir / "llama_cpp.log");
    return std::vector<json::Value>(runs.size(), json::Value::object());
  }
  return json::parse(read_text(answer_path)).at("runs").as_array();
}

std::vector<int32_t> ids_of(const json::Value& v) {
  std::vector<int32_t> out;
  for (const json::Value& e : v.as_array()) out.push_back(static_cast<int32_t>(e.as_int()));
  return out;
}
json::Value json_ids(const std::vector<int32_t>& ids) {
  json::Value a = json::Value::array();
  for (int32_t i : ids) a.push_back(static_cast<int64_t>(i));
  return a;
}

// A family's fixture (tests/fixtures/hf/<family>/config.json, or a .json under tests/, with
// `overrides`) with a fixture tokenizer's vocabulary, its weights drawn at seed 0 with
// initializer_range 0.5: large enough that each greedy step's best token leads the next by a clear
// margin (tiny random models tie otherwise).
std::shared_ptr<nn::CausalLM> family_model(const std::string& family, int64_t vocab, const std::string& overrides = "{}") {
  json::Value config = json::parse(read_text(family.ends_with(".json") ? kTests + "/" + family
                                                                        : kTests + "/fixtures/hf/" + family + "/config.json"));
  config.set("vocab_size", vocab).set("initializer_range", 0.5);
  const json::Value more = json::parse(overrides);
  for (size_t i = 0; i < more.size(); ++i) config.set(more.keys()[i], more.values()[i]);
  Generator gen(0);
  std::shared_ptr<nn::CausalLM> model = nn::parse_pretrained_config(json::dump(config), family).build(gen);
  model->eval();
  return model;
}

// tapegrad's greedy continuation of each prompt, and the softmax at each step.
struct Decoded {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> probs;  // per new token: the distribution it was chosen from
  std::vector<float> gaps;                // per new token: how far its logit leads the next best
  float min_gap(int64_t steps) const { return *std::min_element(gaps.begin(), gaps.begin() + steps); }
};
Decoded tapegrad_greedy(nn::CausalLM& model, const std::vector<int32_t>& prompt, int64_t n) {
  Decoded d;
  const std::vector<int32_t> all = nn::generate(model, {prompt}, {.max_new_tokens = n})[0];
  d.tokens.assign(all.begin() + static_cast<int64_t>(prompt.size()), all.end());
  NoGradGuard no_grad;
  const Tensor ids = from_vector(std::vector<int32_t>(all.begin(), all.end() - 1), {1, static_cast<int64_t>(all.size()) - 1});
  const Tensor logits = model.forward(ids);
  const int64_t vocab = logits.shape()[2];
  const std::vector<float> l = logits.to_vector<float>(), p = softmax(logits, -1).to_vector<float>();
  for (size_t step = 0; step < d.tokens.size(); ++step) {
    const size_t row = (prompt.size() - 1 + step) * static_cast<size_t>(vocab);
    d.probs.emplace_back(p.begin() + static_cast<int64_t>(row), p.begin() + static_cast<int64_t>(row) + vocab);
    float second = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v)
      if (v != d.tokens[step]) second = std::max(second, l[row + v]);
    d.gaps.push_back(l[row + d.tokens[step]] - second);
  }
  return d;
}

// A family's fixture, the fixture tokenizer it is paired with and what its config changes: what
// llama.cpp fixes where transformers reads config.json (Gemma's score scale and sliding layers) and
// Mistral v0.2's window (none; v0.1's is the context_length, EveryFamily below).
struct Family {
  std::string fixture, tokenizer, overrides = "{}";
  double f32_tolerance = 1e-5;  // GELU families: ggml's CPU GELU reads a float16 table
};
constexpr double kGeluTolerance = 5e-4;
std::string name_of(const ::testing::TestParamInfo<Family>& info) { return fs::path(info.param.fixture).stem().string(); }
void PrintTo(const Family& f, std::ostream* os) { *os << f.fixture << " with " << f.tokenizer; }

constexpr int64_t kNewTokens = 12;
// Of these prompts each test takes the one whose greedy steps are the most decisive (tiny random
// models have near-ties, on which rounding decides and a comparison says nothing).
const std::vector<std::vector<int32_t>> kPrompts = {{1, 17, 42, 99, 250, 7}, {1, 300, 5, 64, 128, 2},
                                                    {1, 9, 8, 7, 6, 5},       {1, 200, 201, 202, 33, 44},
                                                    {1, 77, 12, 140, 3, 90},  {1, 500, 411, 27, 19, 256}};

// Each prompt of kPrompts and its greedy decoding.
std::vector<std::pair<std::vector<int32_t>, Decoded>> decodings(nn::CausalLM& model) {
  std::vector<std::pair<std::vector<int32_t>, Decoded>> out;
  for (const std::vector<int32_t>& p : kPrompts) out.emplace_back(p, tapegrad_greedy(model, p, kNewTokens));
  return out;
}

// Of `candidates`, the one whose first `steps` greedy tokens lead by the most.
const std::pair<std::vector<int32_t>, Decoded>& most_decisive(
    const std::vector<std::pair<std::vector<int32_t>, Decoded>>& candidates, int64_t steps) {
  return *std::max_element(candidates.begin(), candidates.end(),
                           [&](const auto& a, const auto& b) { return a.second.min_gap(steps) < b.second.min_gap(steps); });
}

// How closely llama.cpp follows tapegrad on a file of one dtype: its first `exact` greedy tokens are
// tapegrad's (each chosen by at least `margin` in the logits, so rounding cannot flip it) and its
// probabilities are within `tolerance`.
struct Agreement {
  gguf::TensorType dtype;
  int64_t exact;
  double margin, tolerance;
};

// Exports `model` in each dtype and runs them all in llama.cpp, each on its most decisive prompt.
void expect_llama_cpp_agrees(nn::CausalLM& model, const data::Tokenizer& tok, const std::vector<Agreement>& agreements) {
  test::TempDir dir;
  const auto candidates = decodings(model);
  std::vector<json::Value> runs;
  for (const Agreement& a : agreements) {
    const std::string path = dir / (std::string(gguf::type_name(a.dtype)) + ".gguf");
    nn::save_gguf(model, path, {.dtype = a.dtype, .metadata = data::gguf_tokenizer_metadata(tok, model.dims().vocab_size)});
    runs.push_back(json::Value::object()
                       .set("model", path)
                       .set("prompts", json::Value::array({json_ids(most_decisive(candidates, a.exact).first)}))
                       .set("new_tokens", kNewTokens)
                       .set("top", 4));
  }
  const std::vector<json::Value> answers = run_llama_cpp(dir, runs);
  for (size_t r = 0; r < agreements.size(); ++r) {
    const Agreement& a = agreements[r];
    const Decoded& want = most_decisive(candidates, a.exact).second;
    const char* type = gguf::type_name(a.dtype);
    ASSERT_GT(want.min_gap(a.exact), a.margin) << "near-tie in tapegrad's greedy steps: scale the model (gaps "
                                               << testing::PrintToString(want.gaps) << ")";
    ASSERT_TRUE(answers[r].find("greedy")) << "llama.cpp gave no answer for " << type;
    const std::vector<int32_t> got = ids_of(answers[r].at("greedy").as_array()[0]);
    ASSERT_EQ(got.size(), want.tokens.size());
    for (int64_t i = 0; i < a.exact; ++i) ASSERT_EQ(got[i], want.tokens[i]) << "token " << i << " of " << type;
    const auto& top = answers[r].at("top").as_array()[0].as_array();
    for (int64_t step = 0; step < a.exact; ++step)
      for (const json::Value& pair : top[step].as_array()) {
        const int64_t id = pair.as_array()[0].as_int();
        EXPECT_NEAR(pair.as_array()[1].as_double(), want.probs[step][id], a.tolerance)
            << "p(" << id << ") at step " << step << " of " << type;
      }
  }
}

class LlamaCppFamily : public ::testing::TestWithParam<Family> {};

TEST_P(LlamaCppFamily, GreedyTokensAndProbabilitiesAreTapegrads) {
  REQUIRE_LLAMA_CPP();
  const data::Tokenizer tok = data::Tokenizer::from_pretrained(kTests + "/fixtures/tokenizers/" + GetParam().tokenizer);
  auto model = family_model(GetParam().fixture, tok.vocab_size(), GetParam().overrides);
  using gguf::TensorType;
  // F16 and BF16: llama.cpp's CPU matmuls round the activations to the weights' type too (BF16's
  // 8 bits move probabilities by a few hundredths); Q8_0 quantises them to 8 bits.
  expect_llama_cpp_agrees(*model, tok,
                          {{TensorType::kF32, kNewTokens, 1e-3, GetParam().f32_tolerance},
                           {TensorType::kF16, kNewTokens, 0.02, 1e-2},
                           {TensorType::kBF16, 3, 0.25, 0.1},
                           {TensorType::kQ8_0, 4, 0.1, 6e-2}});
}

TEST_P(LlamaCppFamily, LoraAdapterAppliedByLlamaCppIsTheMergedModel) {
  REQUIRE_LLAMA_CPP();
  const data::Tokenizer tok = data::Tokenizer::from_pretrained(kTests + "/fixtures/tokenizers/" + GetParam().tokenizer);
  auto model = family_model(GetParam().fixture, tok.vocab_size(), GetParam().overrides);
  test::TempDir dir;
  const gguf::Metadata vocab = data::gguf_tokenizer_metadata(tok, model->dims().vocab_size);
  nn::save_gguf(*model, dir / "base.gguf", {.dtype = gguf::TensorType::kF32, .metadata = vocab});
  Generator gen(1);
  const std::vector<std::string> targets = model->architecture().lora_targets;  // phi3 has no peft default
  peft::apply_lora(*model, {.r = 4, .lora_alpha = 8,
                            .target_modules = targets.empty() ? std::vector<std::string>{peft::kAllLinear} : targets}, gen);
  for (auto& [path, layer] : peft::lora_layers(*model)) {  // a trained-looking adapter: B no longer zero
    NoGradGuard no_grad;
    copy_(layer->lora_B->weight, randn(layer->lora_B->weight.shape(), gen));
  }
  peft::save_adapter_gguf(*model, dir / "adapter.gguf", {.dtype = gguf::TensorType::kF32});
  peft::merge_and_unload(*model);
  // The most decisive prompt whose tokens the adapter changes (so an ignored adapter would show).
  const auto merged = decodings(*model);
  const auto base = decodings(*family_model(GetParam().fixture, tok.vocab_size(), GetParam().overrides));
  std::vector<std::pair<std::vector<int32_t>, Decoded>> changed;
  for (size_t i = 0; i < merged.size(); ++i)
    if (merged[i].second.tokens != base[i].second.tokens) changed.push_back(merged[i]);
  ASSERT_FALSE(changed.empty()) << "the adapter changes no prompt's tokens: the test would not see it ignored";
  const auto& [prompt, want] = most_decisive(changed, kNewTokens);
  ASSERT_GT(want.min_gap(kNewTokens), 1e-3);
  const json::Value answer = run_llama_cpp(dir, {json::Value::object()
                                                     .set("model", dir / "base.gguf")
                                                     .set("lora", dir / "adapter.gguf")
                                                     .set("prompts", json::Value::array({json_ids(prompt)}))
                                                     .set("new_tokens", kNewTokens)})[0];
  ASSERT_TRUE(answer.find("greedy"));
  EXPECT_EQ(ids_of(answer.at("greedy").as_array()[0]), want.tokens);
}

INSTANTIATE_TEST_SUITE_P(Families, LlamaCppFamily,
                         ::testing::Values(Family{"llama", "spm_legacy"}, Family{"llama3", "llama3"},
                                           Family{"llama_linear", "spm_legacy"}, Family{"llama_yarn", "spm_legacy"},
                                           Family{"mistral", "spm_metaspace", R"({"sliding_window": null})"},
                                           Family{"qwen2", "qwen2"}, Family{"qwen3", "qwen2"},
                                           Family{"gemma2", "spm_legacy", R"({"query_pre_attn_scalar": 16})", kGeluTolerance},
                                           Family{"gemma3", "spm_legacy", R"({"num_hidden_layers": 6, "layer_types": [
                                             "sliding_attention", "sliding_attention", "sliding_attention",
                                             "sliding_attention", "sliding_attention", "full_attention"]})", kGeluTolerance},
                                           Family{"phi3", "spm_legacy"}, Family{"gpt2", "gpt2", "{}", kGeluTolerance},
                                           Family{"gguf/smollm3_config.json", "llama3"},
                                           Family{"olmo2", "qwen2", R"({"attention_bias": false})"},
                                           Family{"qwen3_moe", "qwen2", R"({"mlp_only_layers": []})"},
                                           Family{"mixtral", "spm_legacy"}, Family{"gpt_oss", "llama3"}),
                         name_of);

// The tokenizer fixtures' corpus (hard cases: spaces, digits, CJK, emoji, special tokens) by name,
// less its invalid UTF-8 (given as hex), which JSON cannot carry to llama.cpp.
std::vector<std::pair<std::string, std::string>> corpus_texts() {
  std::vector<std::pair<std::string, std::string>> texts;
  std::ifstream in(kTests + "/fixtures/tokenizers/corpus.jsonl");
  for (std::string line; std::getline(in, line);)
    if (const json::Value entry = json::parse(line); entry.find("text"))
      texts.emplace_back(entry.at("name").as_string(), entry.at("text").as_string());
  return texts;
}

// Where llama.cpp's tokenizers do not do what Hugging Face's (and so tapegrad's) do, whatever the
// GGUF says: a special token's lstrip (RoBERTa's <mask>), Qwen2's NFC normaliser, the space that
// Metaspace's prepend_scheme "first" does not add before a leading space (llama.cpp adds it, as
// sentencepiece does), user-defined tokens inside Llama 2's legacy normaliser, and a
// tokenizer.model's control tokens written in the text (sentencepiece reads them as text).
const std::map<std::string, std::set<std::string>> kLlamaCppDiffers = {
    {"gpt2", {"added_lstrip"}},
    {"llama3", {}},
    {"qwen2", {"combining", "zalgo"}},
    {"spm_legacy", {"added_plain"}},
    {"spm_metaspace", {"leading_space", "leading_spaces", "long_spaces", "one_space", "only_ws", "specials_spm"}},
    {"spm_bpe_model", {"byte_token_text", "specials_spm"}}};

class LlamaCppTokenizer : public ::testing::TestWithParam<std::string> {};

// llama.cpp tokenizes with the GGUF's tokenizer.ggml.* keys as tapegrad's tokenizer does (but for
// kLlamaCppDiffers), and adds the same BOS.
TEST_P(LlamaCppTokenizer, TokenizesAsTheTokenizer) {
  REQUIRE_LLAMA_CPP();
  const data::Tokenizer tok = data::Tokenizer::from_pretrained(kTests + "/fixtures/tokenizers/" + GetParam());
  auto model = family_model("llama", tok.vocab_size());
  test::TempDir dir;
  nn::save_gguf(*model, dir / "m.gguf",
                {.dtype = gguf::TensorType::kF16, .metadata = data::gguf_tokenizer_metadata(tok, tok.vocab_size())});
  const auto texts = corpus_texts();
  json::Value request_texts = json::Value::array();
  for (const auto& [name, text] : texts) request_texts.push_back(text);
  const json::Value answer =
      run_llama_cpp(dir, {json::Value::object().set("model", dir / "m.gguf").set("texts", request_texts)})[0];
  ASSERT_TRUE(answer.find("tokens"));
  const auto& got = answer.at("tokens").as_array();
  ASSERT_EQ(got.size(), texts.size());
  std::set<std::string> differ;
  for (size_t i = 0; i < texts.size(); ++i)
    if (ids_of(got[i]) != tok.encode(texts[i].second, false)) differ.insert(texts[i].first);
  EXPECT_EQ(differ, kLlamaCppDiffers.at(GetParam()));
  const std::vector<int32_t> with = tok.encode("a", true), without = tok.encode("a", false);
  EXPECT_EQ(answer.at("add_bos").as_bool(), with.size() > without.size() && with[0] == tok.bos_token_id());
  if (tok.bos_token_id()) EXPECT_EQ(answer.at("bos").as_int(), *tok.bos_token_id());
  if (tok.eos_token_id()) EXPECT_EQ(answer.at("eos").as_int(), *tok.eos_token_id());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaCppTokenizer,
                         ::testing::Values("gpt2", "llama3", "qwen2", "spm_legacy", "spm_metaspace", "spm_bpe_model"));

// The chat template llama.cpp reads is the folder's, byte for byte.
TEST(LlamaCpp, ReadsTheFoldersChatTemplate) {
  REQUIRE_LLAMA_CPP();
  test::TempDir dir;
  fs::create_directories(dir / "folder");
  fs::copy_file(kTests + "/fixtures/tokenizers/llama3/tokenizer.json", dir / "folder/tokenizer.json");
  fs::copy_file(kTests + "/fixtures/chat_templates/llama3.2/tokenizer_config.json", dir / "folder/tokenizer_config.json");
  const data::Tokenizer tok = data::Tokenizer::from_pretrained(dir / "folder");
  ASSERT_TRUE(tok.chat_template());
  const std::string source = json::parse(read_text(dir / "folder/tokenizer_config.json")).at("chat_template").as_string();
  auto model = family_model("llama3", tok.vocab_size());
  nn::save_gguf(*model, dir / "m.gguf", {.metadata = data::gguf_tokenizer_metadata(tok, tok.vocab_size())});
  const json::Value answer = run_llama_cpp(dir, {json::Value::object().set("model", dir / "m.gguf")})[0];
  ASSERT_TRUE(answer.find("chat_template"));
  EXPECT_EQ(answer.at("chat_template").as_string(), source);
}

}  // namespace
}  // namespace tg
