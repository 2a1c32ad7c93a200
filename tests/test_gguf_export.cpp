// What save_gguf, save_adapter_gguf and gguf_tokenizer_metadata write, read back with io's reader
// (llama.cpp itself runs the files in tests/test_gguf_llama_cpp.cpp).
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "data/gguf_vocab.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/models/gguf.h"
#include "nn/models/pretrained.h"
#include "ops/unary.h"
#include "peft/gguf.h"
#include "peft/lora.h"
#include "test_support.h"

namespace tg {
namespace {

const std::string kTests = TG_TESTS_DIR;
using gguf::TensorType;

data::Tokenizer fixture_tokenizer(const std::string& name) {
  return data::Tokenizer::from_pretrained(kTests + "/fixtures/tokenizers/" + name);
}

// A family's fixture config (tests/fixtures/hf/<family>/config.json, or a .json under tests/).
std::shared_ptr<nn::CausalLM> fixture_model(const std::string& family, int64_t vocab, const std::string& overrides = "{}") {
  const std::vector<uint8_t> b = io::read_file(family.ends_with(".json") ? kTests + "/" + family
                                                                          : kTests + "/fixtures/hf/" + family + "/config.json");
  json::Value config = json::parse(std::string(b.begin(), b.end()));
  config.set("vocab_size", vocab);
  const json::Value more = json::parse(overrides);
  for (size_t i = 0; i < more.size(); ++i) config.set(more.keys()[i], more.values()[i]);
  Generator gen(0);
  return nn::parse_pretrained_config(json::dump(config), family).build(gen);
}

std::vector<float> weight_of(const nn::Module& model, const std::string& linear) {
  return std::dynamic_pointer_cast<nn::Linear>(model.get_submodule(linear))->weight.to_vector<float>();
}

std::string string_at(const gguf::Reader& r, const std::string& key) { return r.header().metadata.at(key).as_string(key); }
int64_t int_at(const gguf::Reader& r, const std::string& key) { return r.header().metadata.at(key).as_int(key); }

TEST(GgufVocab, ByteLevelTokenizersAreGpt2WithLlamaCppsPreTokenizerName) {
  for (const auto& [name, pre] : {std::pair<std::string, std::string>{"gpt2", "gpt-2"}, {"llama3", "llama-bpe"}, {"qwen2", "qwen2"}}) {
    const data::Tokenizer tok = fixture_tokenizer(name);
    const gguf::Metadata m = data::gguf_tokenizer_metadata(tok, tok.vocab_size() + 3);
    EXPECT_EQ(m.at("tokenizer.ggml.model").as_string("model"), "gpt2") << name;
    EXPECT_EQ(m.at("tokenizer.ggml.pre").as_string("pre"), pre) << name;
    const auto& tokens = m.at("tokenizer.ggml.tokens").items("tokens");
    const auto& types = m.at("tokenizer.ggml.token_type").items("types");
    ASSERT_EQ(tokens.size(), static_cast<size_t>(tok.vocab_size() + 3)) << name;
    EXPECT_EQ(tokens.back().as_string("t"), "[PAD" + std::to_string(tok.vocab_size() + 2) + "]");
    EXPECT_EQ(types.back().as_int("t"), 5);  // unused
    for (int32_t id = 0; id < tok.vocab_size(); ++id) ASSERT_EQ(tokens[id].as_string("t"), tok.id_to_token(id)) << name;
    EXPECT_FALSE(m.find("tokenizer.ggml.scores"));
    EXPECT_GT(m.at("tokenizer.ggml.merges").items("merges").size(), 200u);
  }
  const data::Tokenizer llama3 = fixture_tokenizer("llama3");
  const gguf::Metadata m = data::gguf_tokenizer_metadata(llama3, llama3.vocab_size());
  const auto& types = m.at("tokenizer.ggml.token_type").items("types");
  EXPECT_EQ(types[*llama3.token_to_id("<|begin_of_text|>")].as_int("t"), 3);  // control
  EXPECT_EQ(types[*llama3.token_to_id("<tool>")].as_int("t"), 4);             // user-defined
  EXPECT_EQ(types[*llama3.token_to_id("a")].as_int("t"), 1);
  EXPECT_TRUE(m.at("tokenizer.ggml.add_bos_token").as_bool("add_bos"));
  EXPECT_FALSE(m.at("tokenizer.ggml.add_eos_token").as_bool("add_eos"));
  EXPECT_EQ(m.at("tokenizer.ggml.bos_token_id").as_int("bos"), *llama3.bos_token_id());
  EXPECT_EQ(m.at("tokenizer.ggml.merges").items("merges")[0].as_string("merge").find(' ') != std::string::npos, true);
  const data::Tokenizer qwen2 = fixture_tokenizer("qwen2");
  EXPECT_FALSE(data::gguf_tokenizer_metadata(qwen2, qwen2.vocab_size()).at("tokenizer.ggml.add_bos_token").as_bool("b"));
}

TEST(GgufVocab, SentencePieceTokenizersAreLlamaWithScoresInMergeOrder) {
  const data::Tokenizer tok = fixture_tokenizer("spm_legacy");
  const gguf::Metadata m = data::gguf_tokenizer_metadata(tok, tok.vocab_size());
  EXPECT_EQ(m.at("tokenizer.ggml.model").as_string("model"), "llama");
  EXPECT_EQ(m.at("tokenizer.ggml.pre").as_string("pre"), "default");
  EXPECT_TRUE(m.at("tokenizer.ggml.add_space_prefix").as_bool("prefix"));
  const auto& types = m.at("tokenizer.ggml.token_type").items("types");
  const auto& scores = m.at("tokenizer.ggml.scores").items("scores");
  EXPECT_EQ(types[0].as_int("unk"), 2);  // <unk>: unknown
  EXPECT_EQ(types[1].as_int("bos"), 3);
  EXPECT_EQ(types[*tok.token_to_id("<0x0A>")].as_int("byte"), 6);
  EXPECT_EQ(types[*tok.token_to_id("<tool>")].as_int("tool"), 4);
  EXPECT_EQ(m.at("tokenizer.ggml.unknown_token_id").as_int("unk"), 0);
  // A token made by an earlier merge scores higher: llama.cpp merges the best-scoring pair first.
  const std::vector<uint8_t> b = io::read_file(kTests + "/fixtures/tokenizers/spm_legacy/tokenizer.json");
  const json::Value merges = json::parse(std::string(b.begin(), b.end())).at("model").at("merges");
  auto made_by = [&](size_t rank) {
    const auto& pair = merges.as_array()[rank];
    const std::string made = pair.is_string() ? pair.as_string().substr(0, pair.as_string().find(' ')) +
                                                    pair.as_string().substr(pair.as_string().find(' ') + 1)
                                              : pair.as_array()[0].as_string() + pair.as_array()[1].as_string();
    return scores[*tok.token_to_id(made)].as_number("score");
  };
  EXPECT_EQ(made_by(0), 0.0);
  EXPECT_GT(made_by(0), made_by(1));
  EXPECT_GT(made_by(10), made_by(100));
  EXPECT_FALSE(m.find("tokenizer.ggml.merges"));
  const data::Tokenizer model_file = fixture_tokenizer("spm_bpe_model");  // tokenizer.model: its own scores
  const gguf::Metadata sp = data::gguf_tokenizer_metadata(model_file, model_file.vocab_size());
  EXPECT_EQ(sp.at("tokenizer.ggml.model").as_string("model"), "llama");
  EXPECT_EQ(sp.at("tokenizer.ggml.scores").items("scores").size(), static_cast<size_t>(model_file.vocab_size()));
}

TEST(GgufVocab, WhatLlamaCppCannotTokenizeIsRefusedByName) {
  const data::Tokenizer roberta = fixture_tokenizer("roberta");
  EXPECT_ERROR_HAS(data::gguf_tokenizer_metadata(roberta, roberta.vocab_size()), "pre_tokenizer (ByteLevel",
                   "add_prefix_space", "no llama.cpp name");
  const data::Tokenizer llama3 = fixture_tokenizer("llama3");
  EXPECT_ERROR_HAS(data::gguf_tokenizer_metadata(llama3, 10), "604 tokens, more than the model's 10 embeddings");
  json::Value split = json::parse(R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\s+"},
      "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
  EXPECT_ERROR_HAS(data::llama_cpp_pre_tokenizer(split, false), "Sequence of Split ByteLevel", "regex \\s+");
  EXPECT_EQ(data::llama_cpp_pre_tokenizer(json::parse(R"({"type": "ByteLevel", "add_prefix_space": false})"), false),
            "gpt-2");
}

TEST(SaveGguf, LlamaIsLlamaCppsLayout) {
  const data::Tokenizer tok = fixture_tokenizer("llama3");
  auto model = fixture_model("llama3", tok.vocab_size());  // tied head, biases, Llama 3.1 RoPE
  test::TempDir dir;
  nn::save_gguf(*model, dir / "m.gguf", {.dtype = TensorType::kF32, .metadata = data::gguf_tokenizer_metadata(tok, tok.vocab_size())});
  const gguf::Reader r(dir / "m.gguf");
  EXPECT_EQ(string_at(r, "general.architecture"), "llama");
  EXPECT_EQ(int_at(r, "llama.block_count"), 2);
  EXPECT_EQ(int_at(r, "llama.attention.head_count_kv"), 2);
  EXPECT_EQ(int_at(r, "llama.rope.dimension_count"), 16);
  EXPECT_EQ(int_at(r, "general.file_type"), 0);
  EXPECT_EQ(r.header().metadata.at("llama.rope.freq_base").as_number("base"), 500000.0);
  EXPECT_THROW(r.tensor("output.weight"), Error);  // tied: llama.cpp takes token_embd
  const gguf::TensorInfo& q = r.tensor("blk.0.attn_q.weight");
  EXPECT_EQ(q.ne, (std::vector<int64_t>{48, 64}));  // [out 64, in 48] as {in, out}
  // llama.cpp's RoPE rotates pairs: each head's rows go from halves (i, i + 8) to neighbours (2i, 2i + 1).
  const std::vector<float> file = r.floats(q);
  const std::vector<float> src = weight_of(*model, "model.layers.0.self_attn.q_proj");
  for (int64_t head = 0; head < 4; ++head)
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 2; ++j)
        ASSERT_EQ(file[(head * 16 + 2 * i + j) * 48 + 5], src[(head * 16 + j * 8 + i) * 48 + 5]) << head << " " << i;
  const std::vector<float> freqs = r.floats(r.tensor("rope_freqs.weight"));
  ASSERT_EQ(freqs.size(), 8u);
  EXPECT_EQ(freqs[0], 1.0f);    // short wavelengths keep their frequency
  EXPECT_EQ(freqs[7], 8.0f);    // long ones are divided by factor
  EXPECT_EQ(r.tensor("blk.0.ffn_gate.bias").type, TensorType::kF32);
  EXPECT_EQ(r.tensor("blk.1.attn_norm.weight").type, TensorType::kF32);
}

TEST(SaveGguf, DtypesAsTheConverterChoosesThem) {
  const data::Tokenizer tok = fixture_tokenizer("spm_legacy");
  auto model = fixture_model("llama", tok.vocab_size());  // hidden 32, intermediate 48
  const gguf::Metadata vocab = data::gguf_tokenizer_metadata(tok, tok.vocab_size());
  test::TempDir dir;
  nn::save_gguf(*model, dir / "q.gguf", {.dtype = TensorType::kQ8_0, .metadata = vocab});
  const gguf::Reader r(dir / "q.gguf");
  EXPECT_EQ(int_at(r, "general.file_type"), 7);
  EXPECT_EQ(r.tensor("token_embd.weight").type, TensorType::kQ8_0);
  EXPECT_EQ(r.tensor("output.weight").type, TensorType::kQ8_0);
  EXPECT_EQ(r.tensor("blk.0.ffn_up.weight").type, TensorType::kQ8_0);    // rows of 32
  EXPECT_EQ(r.tensor("blk.0.ffn_down.weight").type, TensorType::kF16);  // rows of 48: not whole blocks
  EXPECT_EQ(r.tensor("output_norm.weight").type, TensorType::kF32);
  // The values are the model's, quantised: within half a step of each block's scale.
  const std::vector<float> back = r.floats(r.tensor("blk.0.ffn_up.weight"));
  const std::vector<float> src = weight_of(*model, "model.layers.0.mlp.up_proj");
  ASSERT_EQ(back.size(), src.size());
  for (size_t i = 0; i < src.size(); ++i) ASSERT_NEAR(back[i], src[i], 0.6f / 127 * 0.5f) << i;  // |w| < 0.6 at init 0.1
  EXPECT_ERROR_HAS(nn::save_gguf(*model, dir / "x.gguf", {.dtype = TensorType::kQ4_0, .metadata = vocab}),
                   "dtype Q4_0 is not one tapegrad writes", "llama-quantize");
}

TEST(SaveGguf, GemmaNormsArePlusOne) {
  const data::Tokenizer tok = fixture_tokenizer("spm_legacy");
  auto model = fixture_model("gemma2", tok.vocab_size(), R"({"query_pre_attn_scalar": 16})");
  {
    NoGradGuard no_grad;
    for (auto& [name, t] : model->named_parameters())
      if (name.ends_with("norm.weight")) copy_(t, t + 0.25);  // transformers' init is 0: make them distinct
  }
  test::TempDir dir;
  nn::save_gguf(*model, dir / "g.gguf", {.metadata = data::gguf_tokenizer_metadata(tok, tok.vocab_size())});
  const gguf::Reader r(dir / "g.gguf");
  EXPECT_EQ(string_at(r, "general.architecture"), "gemma2");
  EXPECT_EQ(int_at(r, "gemma2.attention.sliding_window"), 8);
  EXPECT_EQ(r.header().metadata.at("gemma2.attn_logit_softcapping").as_number("cap"), 50.0);
  EXPECT_EQ(r.floats(r.tensor("blk.0.post_ffw_norm.weight"))[0], 1.25f);
  EXPECT_EQ(r.floats(r.tensor("output_norm.weight"))[0], 1.25f);
}

TEST(SaveGguf, RefusesWhatLlamaCppCannotRunBeforeWriting) {
  const data::Tokenizer tok = fixture_tokenizer("spm_legacy");
  const gguf::Metadata vocab = data::gguf_tokenizer_metadata(tok, tok.vocab_size());
  test::TempDir dir;
  const std::string out = dir / "x.gguf";
  auto gemma2 = fixture_model("gemma2", tok.vocab_size());  // query_pre_attn_scalar 24, head_dim 16
  EXPECT_ERROR_HAS(nn::save_gguf(*gemma2, out, {.metadata = vocab}), "query_pre_attn_scalar 24",
                   "scales the scores by 1/sqrt(16)");
  auto untied = fixture_model("gemma3", tok.vocab_size(), R"({"tie_word_embeddings": false})");
  EXPECT_ERROR_HAS(nn::save_gguf(*untied, out, {.metadata = vocab}), "tie_word_embeddings false");
  auto gemma3 = fixture_model("gemma3", tok.vocab_size());  // layers sliding, sliding, global
  EXPECT_ERROR_HAS(nn::save_gguf(*gemma3, out, {.metadata = vocab}), "layer 2 is global", "every 6th layer global");
  auto qwen2 = fixture_model("qwen2", tok.vocab_size(), R"({"rope_parameters": {"rope_type": "llama3", "rope_theta":
      10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}})");
  EXPECT_ERROR_HAS(nn::save_gguf(*qwen2, out, {.metadata = vocab}), "rope_type \"llama3\"", "qwen2 architecture");
  auto llama = fixture_model("llama", tok.vocab_size());
  EXPECT_ERROR_HAS(nn::save_gguf(*llama, out), "no tokenizer", "gguf_tokenizer_metadata");
  auto wider = fixture_model("llama", tok.vocab_size() + 1);
  EXPECT_ERROR_HAS(nn::save_gguf(*wider, out, {.metadata = vocab}), "lists 601 tokens, the model has 602");
  peft::apply_lora(*llama, {});
  EXPECT_ERROR_HAS(nn::save_gguf(*llama, out, {.metadata = vocab}), "is a LoRA weight", "merge_and_unload");
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(SaveGguf, SmolLM3AndOlmo2AreLlamaCppsLayouts) {
  const data::Tokenizer tok = fixture_tokenizer("llama3");
  const gguf::Metadata vocab = data::gguf_tokenizer_metadata(tok, tok.vocab_size());
  test::TempDir dir;
  auto smollm3 = fixture_model("gguf/smollm3_config.json", tok.vocab_size());  // tied, NoPE every 4th layer
  nn::save_gguf(*smollm3, dir / "s.gguf", {.dtype = TensorType::kF32, .metadata = vocab});
  const gguf::Reader s(dir / "s.gguf");
  EXPECT_EQ(string_at(s, "general.architecture"), "smollm3");
  EXPECT_EQ(int_at(s, "smollm3.block_count"), 4);
  EXPECT_THROW(s.tensor("output.weight"), Error);
  // Llama's RoPE layout: each head's rows from halves (i, i + 4) to neighbours (2i, 2i + 1).
  const std::vector<float> k = s.floats(s.tensor("blk.3.attn_k.weight"));
  const std::vector<float> k_src = weight_of(*smollm3, "model.layers.3.self_attn.k_proj");
  for (int64_t head = 0; head < 2; ++head)
    for (int64_t i = 0; i < 4; ++i)
      ASSERT_EQ(k[(head * 8 + 2 * i + 1) * 32 + 3], k_src[(head * 8 + 4 + i) * 32 + 3]) << head << " " << i;

  auto olmo2 = fixture_model("olmo2", tok.vocab_size(), R"({"attention_bias": false})");
  nn::save_gguf(*olmo2, dir / "o.gguf", {.dtype = TensorType::kF32, .metadata = vocab});
  const gguf::Reader o(dir / "o.gguf");
  EXPECT_EQ(string_at(o, "general.architecture"), "olmo2");
  EXPECT_THROW(o.tensor("blk.0.attn_norm.weight"), Error);  // no norms before the branches
  EXPECT_EQ(o.floats(o.tensor("blk.1.post_attention_norm.weight")),
            olmo2->get_parameter("model.layers.1.post_attention_layernorm.weight").to_vector<float>());
  EXPECT_EQ(o.tensor("blk.1.post_ffw_norm.weight").ne, (std::vector<int64_t>{32}));
  EXPECT_EQ(o.tensor("blk.0.attn_k_norm.weight").ne, (std::vector<int64_t>{16}));  // the whole k projection
  EXPECT_EQ(o.floats(o.tensor("blk.0.attn_q.weight")), weight_of(*olmo2, "model.layers.0.self_attn.q_proj"));
  EXPECT_EQ(o.tensor("output.weight").ne, (std::vector<int64_t>{32, tok.vocab_size()}));

  const std::string out = dir / "x.gguf";
  auto moved = fixture_model("gguf/smollm3_config.json", tok.vocab_size(), R"({"no_rope_layers": [1, 1, 0, 1]})");
  EXPECT_ERROR_HAS(nn::save_gguf(*moved, out, {.metadata = vocab}), "layer 2 has no RoPE", "every 4th layer only");
  auto sliding = fixture_model("gguf/smollm3_config.json", tok.vocab_size(), R"({"use_sliding_window": true, "sliding_window": 8})");
  EXPECT_ERROR_HAS(nn::save_gguf(*sliding, out, {.metadata = vocab}), "layer 3 slides a window of 8", "no sliding window");
  auto biased = fixture_model("olmo2", tok.vocab_size());  // the fixture's attention_bias true
  EXPECT_ERROR_HAS(nn::save_gguf(*biased, out, {.metadata = vocab}), "attention_bias true", "no attention biases");
  auto tied = fixture_model("olmo2", tok.vocab_size(), R"({"attention_bias": false, "tie_word_embeddings": true})");
  EXPECT_ERROR_HAS(nn::save_gguf(*tied, out, {.metadata = vocab}), "tie_word_embeddings true", "own output matrix");
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(SaveGguf, MistralsWindowIsTheContext) {
  const data::Tokenizer tok = fixture_tokenizer("spm_legacy");
  auto mistral = fixture_model("mistral", tok.vocab_size());  // sliding_window 8 of 64 positions
  test::TempDir dir;
  nn::save_gguf(*mistral, dir / "m.gguf", {.metadata = data::gguf_tokenizer_metadata(tok, tok.vocab_size())});
  EXPECT_EQ(int_at(gguf::Reader(dir / "m.gguf"), "llama.context_length"), 8);
}

// The experts' [E, 2I, H] gate_up_proj as llama.cpp's ffn_gate_exps and ffn_up_exps {H, I, E}
// (gate rows first), down_proj [E, H, I] as ffn_down_exps {I, H, E}; the router in F32.
TEST(SaveGguf, MoeExpertsAreLlamaCppsStackedTensors) {
  const data::Tokenizer tok = fixture_tokenizer("qwen2");
  const gguf::Metadata vocab = data::gguf_tokenizer_metadata(tok, tok.vocab_size());
  test::TempDir dir;
  // 3 layers of 6 experts of width 24, 2 a token, hidden 32
  auto qwen = fixture_model("qwen3_moe", tok.vocab_size(), R"({"mlp_only_layers": []})");
  nn::save_gguf(*qwen, dir / "q8.gguf", {.dtype = TensorType::kQ8_0, .metadata = vocab});
  const gguf::Reader q8(dir / "q8.gguf");
  EXPECT_EQ(string_at(q8, "general.architecture"), "qwen3moe");
  EXPECT_EQ(int_at(q8, "qwen3moe.expert_count"), 6);
  EXPECT_EQ(int_at(q8, "qwen3moe.expert_used_count"), 2);
  EXPECT_EQ(int_at(q8, "qwen3moe.expert_feed_forward_length"), 24);
  EXPECT_EQ(q8.tensor("blk.2.ffn_gate_inp.weight").type, TensorType::kF32);
  EXPECT_EQ(q8.tensor("blk.2.ffn_gate_inp.weight").ne, (std::vector<int64_t>{32, 6}));
  EXPECT_EQ(q8.tensor("blk.0.ffn_gate_exps.weight").ne, (std::vector<int64_t>{32, 24, 6}));
  EXPECT_EQ(q8.tensor("blk.0.ffn_gate_exps.weight").type, TensorType::kQ8_0);
  EXPECT_EQ(q8.tensor("blk.1.ffn_down_exps.weight").ne, (std::vector<int64_t>{24, 32, 6}));
  EXPECT_EQ(q8.tensor("blk.1.ffn_down_exps.weight").type, TensorType::kF16);  // rows of 24: not whole blocks
  EXPECT_THROW(q8.tensor("blk.0.ffn_gate.weight"), Error);

  nn::save_gguf(*qwen, dir / "f32.gguf", {.dtype = TensorType::kF32, .metadata = vocab});
  const gguf::Reader r(dir / "f32.gguf");
  const std::vector<float> gate_up = qwen->get_parameter("model.layers.1.mlp.experts.gate_up_proj").to_vector<float>();
  const std::vector<float> gate = r.floats(r.tensor("blk.1.ffn_gate_exps.weight")),
                           up = r.floats(r.tensor("blk.1.ffn_up_exps.weight"));
  ASSERT_EQ(gate.size() + up.size(), gate_up.size());
  for (int64_t e = 0; e < 6; ++e)
    for (int64_t row = 0; row < 24; ++row)
      for (int64_t col = 0; col < 32; col += 7) {
        ASSERT_EQ(gate[(e * 24 + row) * 32 + col], gate_up[(e * 48 + row) * 32 + col]) << e << " " << row;
        ASSERT_EQ(up[(e * 24 + row) * 32 + col], gate_up[(e * 48 + 24 + row) * 32 + col]) << e << " " << row;
      }
  EXPECT_EQ(r.floats(r.tensor("blk.2.ffn_down_exps.weight")),
            qwen->get_parameter("model.layers.2.mlp.experts.down_proj").to_vector<float>());
  EXPECT_EQ(r.floats(r.tensor("blk.0.ffn_gate_inp.weight")), weight_of(*qwen, "model.layers.0.mlp.gate"));

  auto mixtral = fixture_model("mixtral", tok.vocab_size());  // Mixtral is llama.cpp's llama with experts
  nn::save_gguf(*mixtral, dir / "m.gguf", {.dtype = TensorType::kF32, .metadata = vocab});
  const gguf::Reader m(dir / "m.gguf");
  EXPECT_EQ(string_at(m, "general.architecture"), "llama");
  EXPECT_EQ(int_at(m, "llama.expert_count"), 6);
  EXPECT_EQ(int_at(m, "llama.expert_used_count"), 2);
  EXPECT_FALSE(m.header().metadata.find("llama.expert_feed_forward_length"));  // the converter writes none
  EXPECT_EQ(m.tensor("blk.1.ffn_up_exps.weight").ne, (std::vector<int64_t>{32, 24, 6}));
  // q's rows reordered for llama.cpp's RoPE, as Llama's: head 0's row 1 <- row 8 (head_dim 16)
  EXPECT_EQ(m.floats(m.tensor("blk.0.attn_q.weight"))[1 * 32 + 3], weight_of(*mixtral, "model.layers.0.self_attn.q_proj")[8 * 32 + 3]);
}

TEST(SaveGguf, RefusesMoeConfigsLlamaCppCannotRun) {
  const data::Tokenizer tok = fixture_tokenizer("qwen2");
  const gguf::Metadata vocab = data::gguf_tokenizer_metadata(tok, tok.vocab_size());
  test::TempDir dir;
  const std::string out = dir / "x.gguf";
  auto dense = fixture_model("qwen3_moe", tok.vocab_size());  // mlp_only_layers [2]
  EXPECT_ERROR_HAS(nn::save_gguf(*dense, out, {.metadata = vocab}), "layer 2 is dense", "experts in every layer");
  auto stepped = fixture_model("qwen3_moe", tok.vocab_size(), R"({"mlp_only_layers": [], "decoder_sparse_step": 2})");
  EXPECT_ERROR_HAS(nn::save_gguf(*stepped, out, {.metadata = vocab}), "layer 0 is dense", "decoder_sparse_step 2");
  auto unnormed = fixture_model("qwen3_moe", tok.vocab_size(), R"({"mlp_only_layers": [], "norm_topk_prob": false})");
  EXPECT_ERROR_HAS(nn::save_gguf(*unnormed, out, {.metadata = vocab}), "norm_topk_prob false", "always renormalises");
  auto gpt_oss = fixture_model("gpt_oss", tok.vocab_size(), R"({"layer_types": ["full_attention", "sliding_attention"]})");
  EXPECT_ERROR_HAS(nn::save_gguf(*gpt_oss, out, {.metadata = vocab}), "layer 0 is full", "slides the even layers only");
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(SaveAdapterGguf, LoraTensorsAreLlamaCppsAdapter) {
  const data::Tokenizer tok = fixture_tokenizer("spm_legacy");
  auto model = fixture_model("llama", tok.vocab_size());
  Generator gen(3);
  peft::apply_lora(*model, {.r = 4, .lora_alpha = 12}, gen);
  for (auto& [path, layer] : peft::lora_layers(*model)) {
    NoGradGuard no_grad;
    copy_(layer->lora_B->weight, randn(layer->lora_B->weight.shape(), gen));
  }
  test::TempDir dir;
  peft::save_adapter_gguf(*model, dir / "a.gguf", {.dtype = TensorType::kF32});
  const gguf::Reader r(dir / "a.gguf");
  EXPECT_EQ(string_at(r, "general.type"), "adapter");
  EXPECT_EQ(string_at(r, "adapter.type"), "lora");
  EXPECT_EQ(r.header().metadata.at("adapter.lora.alpha").as_number("alpha"), 12.0);
  EXPECT_EQ(r.header().tensors.size(), 2u * 4 * 2);  // A and B of q, k, v, o in 2 layers
  EXPECT_EQ(r.tensor("blk.1.attn_v.weight.lora_a").ne, (std::vector<int64_t>{32, 4}));
  EXPECT_EQ(r.tensor("blk.1.attn_v.weight.lora_b").ne, (std::vector<int64_t>{4, 16}));
  // lora_b's rows of q are reordered as q's are (head_dim 8).
  const std::vector<float> b = r.floats(r.tensor("blk.0.attn_q.weight.lora_b"));
  const std::vector<float> src = peft::lora_layers(*model)[0].second->lora_B->weight.to_vector<float>();
  EXPECT_EQ(b[(2 * 1 + 1) * 4 + 2], src[(1 * 1 + 4) * 4 + 2]);  // head 0: row 3 <- row 5
  peft::LoraConfig with_head{.target_modules = {"q_proj"}, .modules_to_save = {"lm_head"}};
  auto saved = fixture_model("llama", tok.vocab_size());
  peft::apply_lora(*saved, with_head);
  EXPECT_ERROR_HAS(peft::save_adapter_gguf(*saved, dir / "b.gguf"), "'lm_head.weight' is trained beside the adapters");
  auto plain = fixture_model("llama", tok.vocab_size());
  EXPECT_ERROR_HAS(peft::save_adapter_gguf(*plain, dir / "b.gguf"), "no LoRA layers");
}

// peft's target_parameters adapters of 3-D expert weights have no llama.cpp form (its
// convert_lora_to_gguf.py maps no such key); the attention's adapters of the same model do.
TEST(SaveAdapterGguf, ExpertAdaptersAreRefusedByName) {
  const data::Tokenizer tok = fixture_tokenizer("spm_legacy");
  test::TempDir dir;
  auto experts = fixture_model("mixtral", tok.vocab_size());
  peft::apply_lora(*experts, {.target_modules = {"q_proj"}, .target_parameters = {"mlp.experts.down_proj"}});
  EXPECT_ERROR_HAS(peft::save_adapter_gguf(*experts, dir / "a.gguf"),
                   "'model.layers.0.mlp.experts.down_proj' is adapted as peft's target_parameters", "merge_and_unload");
  EXPECT_FALSE(std::filesystem::exists(dir / "a.gguf"));
  auto attention = fixture_model("mixtral", tok.vocab_size());
  peft::apply_lora(*attention, {.target_modules = {"q_proj", "v_proj"}});
  peft::save_adapter_gguf(*attention, dir / "a.gguf");
  const gguf::Reader r(dir / "a.gguf");
  EXPECT_EQ(string_at(r, "general.architecture"), "llama");
  EXPECT_EQ(r.header().tensors.size(), 2u * 2 * 2);  // A and B of q and v in 2 layers
}

}  // namespace
}  // namespace tg
