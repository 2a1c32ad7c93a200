// nn::generate and the KV cache: the cached forward against a full recompute at every step
// (float32 and bfloat16, Llama with grouped-query heads and GPT-2, padded batches, a chunk after
// cached tokens), greedy tokens against the recomputing loop, batched against one by one, LoRA
// unmerged against merged, sampling from the seed, EOS and max_new_tokens per sequence, the
// processors, the config's checks and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/autograd.h"
#include "core/cuda_graph.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "data/tokenizer.h"
#include "examples/common/printable.h"
#include "examples/common/vocabulary.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/generation/generation.h"
#include "nn/generation/kv_cache.h"
#include "nn/generation/logits_process.h"
#include "nn/models/gpt2.h"
#include "nn/models/llama.h"
#include "nn/models/pretrained.h"
#include "nn/state_dict.h"
#include "ops/cast.h"
#include "ops/reduce.h"
#include "ops/sample.h"
#include "ops/sample_kernels.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;
using nn::GenerationConfig;

// Small models with weights large enough that greedy choices are not near-ties.
std::shared_ptr<nn::LlamaForCausalLM> llama(uint64_t seed = 0) {
  nn::LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 40;
  c.initializer_range = 0.2;
  Generator gen(seed);
  return std::make_shared<nn::LlamaForCausalLM>(c, gen);
}

std::shared_ptr<nn::GPT2LMHeadModel> gpt2(uint64_t seed = 0) {
  nn::GPT2Config c = nn::GPT2Config::tiny();
  c.vocab_size = 61;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_positions = 40;
  c.initializer_range = 0.8;  // GPT-2's tied head repeats one token greedily below ~0.5
  Generator gen(seed);
  return std::make_shared<nn::GPT2LMHeadModel>(c, gen);
}

std::vector<int32_t> random_ids(int64_t n, uint64_t seed, int64_t vocab = 61) {
  Generator gen(seed);
  std::vector<int32_t> ids;
  for (int64_t v : randint(0, vocab, {n}, gen).to_vector<int64_t>()) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

Tensor ids_tensor(const std::vector<int32_t>& ids) {
  return from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {1, static_cast<int64_t>(ids.size())});
}

// LoRA whose B is not zero, so the adapters change what the model computes.
void lora_with_random_b(nn::Module& m, const std::vector<std::string>& targets, uint64_t seed) {
  Generator gen(seed);
  peft::apply_lora(m, {.target_modules = targets}, gen);
  NoGradGuard no_grad;
  for (auto& [name, layer] : peft::lora_layers(m))
    copy_(layer->lora_B->weight, mul(randn(layer->lora_B->weight.shape(), gen), 0.1));
}

// The model's cached body (hidden states) and its full forward (logits), for either family.
struct Lm {
  nn::Module* model;
  std::function<Tensor(const Tensor&, nn::KVCache&)> cached;
  nn::Linear* head;
  int64_t layers, kv_heads, head_dim;
};
Lm lm_of(nn::LlamaForCausalLM& m) {
  return {&m, [&m](const Tensor& ids, nn::KVCache& c) { return m.model->forward(ids, c); }, m.lm_head.get(),
          m.config.num_hidden_layers, m.config.kv_heads(), m.config.head_dim()};
}
Lm lm_of(nn::GPT2LMHeadModel& m) {
  return {&m, [&m](const Tensor& ids, nn::KVCache& c) { return m.transformer->forward(ids, c); }, m.lm_head.get(),
          m.config.n_layer, m.config.n_head, m.config.n_embd / m.config.n_head};
}

// Logits of position t of sequence `ids` by the full (uncached) forward, as float32 [V].
Tensor full_logits_at(nn::Module& model, const std::vector<int32_t>& ids, int64_t t) {
  Tensor logits = model.forward(ids_tensor(std::vector<int32_t>(ids.begin(), ids.begin() + t + 1)));
  return to(reshape(slice(logits, 1, t, t + 1), {logits.shape()[2]}), kFloat32);
}

// Sequences in one cache (left-padded when their lengths differ), fed as: a prefill of the
// first 5 columns, a chunk of 3 after them, then one column a step. Every step's logits of every
// sequence match the full forward of that sequence alone.
void expect_cached_equals_recompute(const Lm& lm, DType dtype, double tol, const std::vector<int64_t>& lengths) {
  NoGradGuard no_grad;
  lm.model->eval();
  std::vector<std::vector<int32_t>> seqs;
  for (int64_t n : lengths) seqs.push_back(random_ids(n, static_cast<uint64_t>(seqs.size() + 1)));
  const int64_t B = static_cast<int64_t>(lengths.size()), longest = 14, prefill = 5, chunk = 3;
  std::vector<int64_t> pad;
  for (const auto& s : seqs) pad.push_back(longest - static_cast<int64_t>(s.size()));
  nn::KVCache cache(lm.layers, B, lm.kv_heads, lm.head_dim, longest, {dtype}, pad);
  int64_t col = 0;
  for (int64_t T : {prefill, chunk, int64_t{1}, int64_t{1}, int64_t{1}, int64_t{1}, int64_t{1}, int64_t{1}}) {
    std::vector<int64_t> ids;  // columns col..col+T-1 of every sequence (padding columns: id 0)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = col; c < col + T; ++c) ids.push_back(c < pad[b] ? 0 : seqs[b][c - pad[b]]);
    Tensor hidden = lm.cached(from_vector(ids, {B, T}), cache);
    ASSERT_EQ(cache.length(), col + T);
    Tensor logits = to(lm.head->forward(hidden), kFloat32);  // [B, T, V]
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = std::max(col, pad[b]); c < col + T; ++c) {
        SCOPED_TRACE("sequence " + std::to_string(b) + " of " + std::to_string(B) + ", position " +
                     std::to_string(c - pad[b]) + ", " + dtype_name(dtype));
        Tensor got = reshape(slice(slice(logits, 0, b, b + 1), 1, c - col, c - col + 1), {logits.shape()[2]});
        EXPECT_TENSOR_NEAR(got, full_logits_at(*lm.model, seqs[b], c - pad[b]), tol, tol);
      }
    col += T;
  }
}

TEST(KVCache, CachedForwardEqualsFullRecomputeLlamaFloat32) {
  auto m = llama();
  for (const auto& lengths : {std::vector<int64_t>{14, 10, 13}, std::vector<int64_t>{14, 14}})
    expect_cached_equals_recompute(lm_of(*m), kFloat32, 2e-5, lengths);
}

TEST(KVCache, CachedForwardEqualsFullRecomputeLlamaBFloat16) {
  auto m = llama();
  m->to(kBFloat16);
  for (const auto& lengths : {std::vector<int64_t>{14, 10, 13}, std::vector<int64_t>{14, 14}})
    expect_cached_equals_recompute(lm_of(*m), kBFloat16, 0.1, lengths);  // bf16 logits of size ~3: a few ulps
}

TEST(KVCache, CachedForwardEqualsFullRecomputeGPT2Float32) {
  auto m = gpt2();
  for (const auto& lengths : {std::vector<int64_t>{14, 10, 13}, std::vector<int64_t>{14, 14}})
    expect_cached_equals_recompute(lm_of(*m), kFloat32, 2e-5, lengths);
}

TEST(KVCache, CachedForwardEqualsFullRecomputeGPT2BFloat16) {
  auto m = gpt2();
  m->to(kBFloat16);
  for (const auto& lengths : {std::vector<int64_t>{14, 10, 13}, std::vector<int64_t>{14, 14}})
    expect_cached_equals_recompute(lm_of(*m), kBFloat16, 0.1, lengths);
}

TEST(KVCache, CachedForwardEqualsFullRecomputeWithLoraUnmergedBFloat16) {
  // The mixed precision of examples' --dtype bf16: a bf16 base, float32 adapters (B not zero).
  auto m = llama();
  m->to(kBFloat16);
  lora_with_random_b(*m, {"q_proj", "k_proj", "v_proj", "o_proj", "lm_head"}, 3);
  for (const auto& lengths : {std::vector<int64_t>{14, 10, 13}, std::vector<int64_t>{14, 14}})
    expect_cached_equals_recompute(lm_of(*m), kBFloat16, 0.15, lengths);
}

TEST(KVCache, StepsAndMisuseAreChecked) {
  auto m = llama();
  m->eval();
  nn::KVCache cache(2, 1, 2, 8, 4, {kFloat32});
  Tensor ids = from_vector(std::vector<int64_t>{1, 2, 3}, {1, 3});
  EXPECT_ERROR_HAS(m->model->forward(ids, cache), "LlamaModel", "inference only", "NoGradGuard");
  NoGradGuard no_grad;
  m->model->forward(ids, cache);
  EXPECT_ERROR_HAS(m->model->forward(ids, cache), "LlamaModel", "holds 4 columns, 3 filled", "3 more tokens");
  EXPECT_EQ(cache.length(), 3);
  nn::KVCache three_layers(3, 1, 2, 8, 4, {kFloat32});
  EXPECT_ERROR_HAS(m->model->forward(ids, three_layers), "KVCache of 3 layers (the model has 2)");
  nn::KVCache bf16(2, 1, 2, 8, 4, {kBFloat16});
  EXPECT_ERROR_HAS(m->model->forward(ids, bf16), "CausalSelfAttention", "computes float32", "holds bfloat16");
  EXPECT_ERROR_HAS(nn::KVCache(2, 2, 2, 8, 4, {kFloat32}, {0, 4}), "padding[1] = 4", "outside [0, max_length 4)");
  EXPECT_ERROR_HAS(nn::KVCache(2, 2, 2, 8, 4, {kFloat32}, {0}), "padding has 1 entries for a batch of 2");
  nn::KVCache past_rope(2, 1, 2, 8, 64, {kFloat32});
  EXPECT_ERROR_HAS(m->model->forward(zeros({1, 41}, {kInt64}), past_rope), "position 40",
                   "max_position_embeddings 40");
}

TEST(KVCache, ADecodeStepAttendsWithoutAMaskAndAPromptIsCausal) {
  NoGradGuard no_grad;
  nn::KVCache cache(1, 2, 1, 4, 8, {kFloat32});
  nn::CacheStep prompt = cache.step(5, "test");
  EXPECT_TRUE(prompt.is_causal && prompt.uniform);
  EXPECT_FALSE(prompt.attn_mask.defined() || prompt.positions.defined());
  cache.advance(5);
  nn::CacheStep decode = cache.step(1, "test");
  EXPECT_FALSE(decode.is_causal || decode.attn_mask.defined());
  nn::CacheStep chunk = cache.step(2, "test");  // after cached tokens: bottom-right causal, as a mask
  ASSERT_TRUE(chunk.attn_mask.defined());
  EXPECT_EQ(chunk.attn_mask.shape(), Shape({2, 1, 2, 7}));
  EXPECT_EQ(chunk.attn_mask.to_vector<bool>(),
            std::vector<bool>({1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1}));
  nn::KVCache padded(1, 2, 1, 4, 8, {kFloat32}, {2, 0});
  nn::CacheStep p = padded.step(3, "test");  // sequence 0: columns 0, 1 padding
  EXPECT_FALSE(p.is_causal || p.uniform);
  EXPECT_EQ(p.positions.to_vector<int64_t>(), std::vector<int64_t>({0, 0, 0, 0, 1, 2}));
  EXPECT_EQ(p.max_position, 2);
  // A padding column's query sees only itself (no empty row); a token never sees padding.
  EXPECT_EQ(p.attn_mask.to_vector<bool>(), std::vector<bool>({1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1}));
}

// The greedy continuation by recomputing the whole sequence for every token (the reference).
std::vector<int32_t> greedy_by_recompute(nn::Module& model, std::vector<int32_t> ids, int64_t n) {
  NoGradGuard no_grad;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = static_cast<int64_t>(ids.size());
    Tensor logits = model.forward(ids_tensor(ids));
    ids.push_back(static_cast<int32_t>(argmax(slice(logits, 1, t - 1, t), -1).item<int64_t>()));
  }
  return ids;
}

template <class Model>
void expect_greedy_equals_recompute(Model& model) {
  model.eval();
  const std::vector<int32_t> prompt = random_ids(6, 7);
  const auto out = nn::generate(model, {prompt}, {.max_new_tokens = 20});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], greedy_by_recompute(model, prompt, 20));
}

TEST(Generate, GreedyEqualsRecomputingEveryStepLlama) {
  auto m = llama();
  expect_greedy_equals_recompute(*m);
}

TEST(Generate, GreedyEqualsRecomputingEveryStepGPT2) {
  auto m = gpt2();
  expect_greedy_equals_recompute(*m);
}

TEST(Generate, BatchedPromptsOfDifferentLengthsEqualOneByOne) {
  for (int family = 0; family < 2; ++family) {
    std::shared_ptr<nn::Module> m = family == 0 ? std::shared_ptr<nn::Module>(llama()) : gpt2();
    const std::vector<std::vector<int32_t>> prompts = {random_ids(3, 11), random_ids(9, 12), random_ids(1, 13),
                                                       random_ids(6, 14)};
    const GenerationConfig cfg{.max_new_tokens = 15, .repetition_penalty = 1.3};
    const auto batched = nn::generate(*m, prompts, cfg);
    ASSERT_EQ(batched.size(), prompts.size());
    for (size_t b = 0; b < prompts.size(); ++b) {
      EXPECT_EQ(batched[b], nn::generate(*m, {prompts[b]}, cfg)[0]) << "family " << family << ", prompt " << b;
      EXPECT_EQ(batched[b].size(), prompts[b].size() + 15);
    }
  }
}

TEST(Generate, EosStopsEachSequenceAndMaxNewTokensTheRest) {
  auto m = llama();
  const std::vector<std::vector<int32_t>> prompts = {random_ids(4, 21), random_ids(7, 22), random_ids(5, 23)};
  const auto free_run = nn::generate(*m, prompts, {.max_new_tokens = 12});
  // EOS: the token prompt 0 generates 4th; each sequence must end at its first occurrence.
  const int32_t eos = free_run[0][prompts[0].size() + 3];
  std::vector<std::pair<int64_t, int32_t>> streamed;
  const auto out = nn::generate(*m, prompts, {.max_new_tokens = 12, .eos_token_id = {eos}},
                                [&](int64_t b, int32_t t) { streamed.emplace_back(b, t); });
  size_t stopped = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    std::vector<int32_t> want(free_run[b].begin(), free_run[b].begin() + static_cast<int64_t>(prompts[b].size()));
    for (size_t i = prompts[b].size(); i < free_run[b].size(); ++i) {
      want.push_back(free_run[b][i]);
      if (free_run[b][i] == eos) break;
    }
    stopped += want.back() == eos;
    EXPECT_EQ(out[b], want) << "prompt " << b;
  }
  EXPECT_EQ(out[0].back(), eos);
  EXPECT_LE(out[0].size(), prompts[0].size() + 4);
  EXPECT_LT(stopped, prompts.size()) << "the test wants a sequence that runs to max_new_tokens";
  // The streamer saw every new token once, sequences in order within a step.
  size_t total = 0;
  for (size_t b = 0; b < prompts.size(); ++b) total += out[b].size() - prompts[b].size();
  EXPECT_EQ(streamed.size(), total);
  std::vector<std::vector<int32_t>> rebuilt = prompts;
  for (auto [b, t] : streamed) rebuilt[static_cast<size_t>(b)].push_back(t);
  EXPECT_EQ(rebuilt, out);
  ASSERT_GE(streamed.size(), 3u);
  EXPECT_EQ(streamed[0].first, 0);
  EXPECT_EQ(streamed[1].first, 1);
  EXPECT_EQ(streamed[2].first, 2);
}

TEST(Generate, SamplingIsReproducibleFromTheSeed) {
  auto m = gpt2();
  const std::vector<std::vector<int32_t>> prompts = {random_ids(3, 31), random_ids(5, 32)};
  GenerationConfig cfg{.max_new_tokens = 16, .do_sample = true, .temperature = 1.5, .top_k = 0, .seed = 5};
  const auto a = nn::generate(*m, prompts, cfg);
  randn({100});  // the default generator moves; the samples do not
  EXPECT_EQ(nn::generate(*m, prompts, cfg), a);
  cfg.seed = 6;
  EXPECT_NE(nn::generate(*m, prompts, cfg), a);
  // Sampling differs from greedy, and temperature 0 is greedy even with do_sample.
  const auto greedy = nn::generate(*m, prompts, {.max_new_tokens = 16});
  EXPECT_NE(a, greedy);
  EXPECT_EQ(nn::generate(*m, prompts, {.max_new_tokens = 16, .do_sample = true, .temperature = 0.0}), greedy);
  // top_k 1 leaves only the most likely token: greedy too, through the sampler.
  EXPECT_EQ(nn::generate(*m, prompts, {.max_new_tokens = 16, .do_sample = true, .top_k = 1, .seed = 9}), greedy);
}

TEST(Generate, LoraUnmergedEqualsMerged) {
  for (int family = 0; family < 2; ++family) {
    std::shared_ptr<nn::Module> m = family == 0 ? std::shared_ptr<nn::Module>(llama()) : gpt2();
    const std::vector<std::vector<int32_t>> prompts = {random_ids(4, 41), random_ids(8, 42)};
    const auto base = nn::generate(*m, prompts, {.max_new_tokens = 14});
    lora_with_random_b(*m, family == 0 ? std::vector<std::string>{"q_proj", "v_proj", "down_proj"}
                                       : std::vector<std::string>{"c_attn", "c_fc"}, 4);
    const auto unmerged = nn::generate(*m, prompts, {.max_new_tokens = 14});
    EXPECT_NE(unmerged, base) << "family " << family << ": the adapters should change the output";
    EXPECT_EQ(unmerged[1], greedy_by_recompute(*m, prompts[1], 14)) << "family " << family;
    peft::merge_and_unload(*m);
    EXPECT_EQ(nn::generate(*m, prompts, {.max_new_tokens = 14}), unmerged) << "family " << family;
  }
}

TEST(Generate, TheModelsModeIsRestored) {
  auto m = gpt2();
  m->train();
  nn::generate(*m, {{1, 2}}, {.max_new_tokens = 2});
  EXPECT_TRUE(m->is_training());
  m->eval();
  nn::generate(*m, {{1, 2}}, {.max_new_tokens = 2});
  EXPECT_FALSE(m->is_training());
}

TEST(Generate, BadInputIsNamed) {
  auto m = llama();
  const std::vector<std::vector<int32_t>> p = {{1, 2, 3}};
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.max_new_tokens = 0}), "max_new_tokens must be at least 1, got 0");
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.do_sample = true, .temperature = -1}), "temperature must be >= 0");
  // 1e-300 is 0 as a float: the sampler's logits / temperature were inf and NaN, reported later as something else.
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.do_sample = true, .temperature = 1e-300}),
                   "temperature 1e-300 is below 1e-06: logits / temperature overflow float32");
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.do_sample = true, .top_k = -2}), "top_k must be >= 0");
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.do_sample = true, .top_p = 0}), "top_p must be in (0, 1]");
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.repetition_penalty = 0}), "repetition_penalty must be >= 1e-06");
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.temperature = 0.8}), "temperature 0.8 is set but do_sample is false");
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.top_k = 10}), "top_k 10 is set but do_sample is false");
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.top_p = 0.9}), "top_p 0.9 is set but do_sample is false");
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.max_new_tokens = 38}),
                   "longest prompt (3 tokens) + max_new_tokens 38 exceeds the model's context "
                   "(max_position_embeddings 40)");
  // Near 2^63 the prompt + max_new_tokens sum overflowed into a small number that passed.
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.max_new_tokens = INT64_MAX - 1}), "exceeds the model's context");
  EXPECT_ERROR_HAS(nn::generate(*m, {{1}, {}}, {}), "prompt 1 is empty");
  EXPECT_ERROR_HAS(nn::generate(*m, {}, {}), "input_ids holds no prompt");
  EXPECT_ERROR_HAS(nn::generate(*m, {{1, 61}}, {}), "prompt 0 holds token 61 at 1", "vocabulary [0, 61)");
  EXPECT_ERROR_HAS(nn::generate(*m, p, {.eos_token_id = {61}}), "eos_token_id 61", "61 logits");
  nn::Linear not_a_language_model(4, 4);
  EXPECT_ERROR_HAS(nn::generate(not_a_language_model, p, {}), "wants a causal LM (LlamaForCausalLM",
                   "got Linear");
  auto g = gpt2();
  EXPECT_ERROR_HAS(nn::generate(*g, p, {.max_new_tokens = 38}), "(n_positions 40)");
}

TEST(LogitsProcessors, AsTransformersDefinesThem) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> s = {2.0f, -1.0f, 0.5f, 3.0f};
  nn::apply_repetition_penalty(s, std::vector<int32_t>{0, 1, 1}, 2.0);  // each id once
  EXPECT_EQ(s, std::vector<float>({1.0f, -2.0f, 0.5f, 3.0f}));
  nn::apply_temperature(s, 0.5);
  EXPECT_EQ(s, std::vector<float>({2.0f, -4.0f, 1.0f, 6.0f}));
  std::vector<float> k = {1.0f, 3.0f, 3.0f, 2.0f, 0.0f};
  nn::apply_top_k(k, 2);  // ties at the k-th score stay
  EXPECT_EQ(k, std::vector<float>({-inf, 3.0f, 3.0f, -inf, -inf}));
  // probabilities 0.5, 0.25, 0.125, 0.125: top_p 0.6 keeps the two most likely, 0.5 only one
  const float l2 = std::log(2.0f);
  std::vector<float> p = {3 * l2, 2 * l2, l2, l2};
  std::vector<float> q = p;
  nn::apply_top_p(p, 0.6);
  EXPECT_EQ(p, std::vector<float>({3 * l2, 2 * l2, -inf, -inf}));
  nn::apply_top_p(q, 0.5);
  EXPECT_EQ(q, std::vector<float>({3 * l2, -inf, -inf, -inf}));
  // The draw: the cumulative probabilities 0.5, 0.75, 0.875, 1 in vocabulary order.
  const std::vector<float> d = {3 * l2, 2 * l2, l2, l2};
  EXPECT_EQ(nn::sample_token(d, 0.0f, "t"), 0);
  EXPECT_EQ(nn::sample_token(d, 0.49f, "t"), 0);
  EXPECT_EQ(nn::sample_token(d, 0.51f, "t"), 1);
  EXPECT_EQ(nn::sample_token(d, 0.8f, "t"), 2);
  EXPECT_EQ(nn::sample_token(d, 0.99f, "t"), 3);
  EXPECT_EQ(nn::sample_token(std::vector<float>{-inf, 1.0f, -inf}, 0.99f, "t"), 1);
  EXPECT_EQ(nn::argmax_token(std::vector<float>{1.0f, 4.0f, 4.0f}, "t"), 1);  // the first maximum
  EXPECT_ERROR_HAS(nn::argmax_token(std::vector<float>{1.0f, NAN}, "generate"), "generate", "token 1 is NaN");
  EXPECT_ERROR_HAS(nn::sample_token(std::vector<float>{-inf, -inf}, 0.5f, "generate"), "no token has a finite score");
}

// ---- plain sampling on the logits' device (ops/sample.h) ----

// How often each index is drawn over `rows` rows holding the same scores (each row its own draw).
std::vector<double> draw_frequencies(const std::vector<float>& scores, int64_t rows, double temperature) {
  std::vector<float> all;
  for (int64_t r = 0; r < rows; ++r) all.insert(all.end(), scores.begin(), scores.end());
  const auto V = static_cast<int64_t>(scores.size());
  std::vector<double> freq(scores.size(), 0.0);
  for (int64_t id : sample_categorical(from_vector(all, {rows, V}), temperature, 3, 0).to_vector<int64_t>())
    freq.at(static_cast<size_t>(id)) += 1.0 / static_cast<double>(rows);
  return freq;
}

TEST(SampleCategorical, DrawsFromTheTemperedSoftmax) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> scores;
  for (double v : p) scores.push_back(static_cast<float>(std::log(v)) + 7.0f);  // any shift
  scores.push_back(-inf);                                                       // never drawn
  for (double t : {1.0, 2.0}) {
    std::vector<double> want;
    double total = 0;
    for (double v : p) total += std::pow(v, 1 / t);
    for (double v : p) want.push_back(std::pow(v, 1 / t) / total);
    const std::vector<double> got = draw_frequencies(scores, 20000, t);
    for (size_t j = 0; j < p.size(); ++j) EXPECT_NEAR(got[j], want[j], 0.015) << "temperature " << t << " index " << j;
    EXPECT_EQ(got[4], 0.0);
  }
}

TEST(SampleCategorical, NoiseIsFiniteAtTheExtremeBits) {
  // Found at 64 x 128256 bf16 logits on the GPU: 24 bits and a half step rounded u to 1.0f,
  // so one element in 2^24 got +inf noise and its row "no finite score".
  for (uint32_t bits : {0u, 1u, 0x1FFu, 0x200u, 0xFFFFFE00u, 0xFFFFFFFFu}) {
    EXPECT_TRUE(std::isfinite(gumbel(bits))) << bits;
    EXPECT_LT(gumbel(bits), 17.0f) << bits;
  }
  EXPECT_LT(gumbel(0), gumbel(0xFFFFFFFFu));
}

TEST(SampleCategorical, ReportsNanAndRowsWithoutAFiniteScore) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor logits = from_vector(std::vector<float>{0, NAN, -inf, -inf, inf, 0, 5, -inf}, {4, 2});
  EXPECT_EQ(sample_categorical(logits, 1.0, 0, 0).to_vector<int64_t>(),
            (std::vector<int64_t>{kSampleNan, kSampleNotFinite, kSampleNotFinite, 0}));
  EXPECT_ERROR_HAS(sample_categorical(logits, 0.0, 0, 0), "sample_categorical", "temperature must be a positive");
  EXPECT_ERROR_HAS(sample_categorical(from_vector(std::vector<float>{1, 2}, {2}), 1.0, 0, 0), "wants logits [B, V]");
}

TEST(SampleCategorical, TheGpuDrawsTheCpusTokens) {
  TG_REQUIRE_CUDA();
  Generator gen(4);
  for (const auto& [B, V] : {std::pair<int64_t, int64_t>{64, 128256}, {3, 1001}, {1, 3}}) {
    for (DType dtype : {kFloat32, kBFloat16}) {
      const Tensor logits = to(mul(randn({B, V}, gen), 3.0), dtype);
      const auto cpu = sample_categorical(logits, 0.7, 21, 5).to_vector<int64_t>();
      EXPECT_EQ(sample_categorical(to(logits, Device::cuda()), 0.7, 21, 5).to_vector<int64_t>(), cpu)
          << B << " x " << V << " " << dtype;
    }
  }
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(GenerationConfigTest, FromPretrainedReadsTransformersFiles) {
  const fs::path tiny = fs::path(TG_TESTS_DIR) / "fixtures" / "tokenizers" / "tiny_llama";
  EXPECT_EQ(GenerationConfig::from_pretrained(tiny.string()).eos_token_id, std::vector<int32_t>({2}));
  TempDir dir;
  write(dir / "config.json", R"({"eos_token_id": [7, 9]})");  // no generation_config.json: config.json's EOS
  EXPECT_EQ(GenerationConfig::from_pretrained(dir.str()).eos_token_id, std::vector<int32_t>({7, 9}));
  write(dir / "generation_config.json",
        R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "eos_token_id": [128001, 128009],
            "max_length": 4096, "num_beams": 1, "bos_token_id": 1, "transformers_version": "5.17.0"})");
  GenerationConfig c = GenerationConfig::from_pretrained(dir.str());
  EXPECT_TRUE(c.do_sample);
  EXPECT_EQ(c.temperature, 0.6);
  EXPECT_EQ(c.top_p, 0.9);
  EXPECT_EQ(c.top_k, 50);
  EXPECT_EQ(c.eos_token_id, std::vector<int32_t>({128001, 128009}));
  write(dir / "generation_config.json", R"({"num_beams": 4})");
  EXPECT_ERROR_HAS(GenerationConfig::from_pretrained(dir.str()), "generation_config.json", "num_beams = 4",
                   "not supported");
  write(dir / "generation_config.json", R"({"temperature": 0.7, "top_p": 0.8, "repetition_penalty": 1.2})");
  c = GenerationConfig::from_pretrained(dir.str());  // greedy: the sampling fields unused, as in transformers
  EXPECT_TRUE(c.greedy());
  EXPECT_EQ(c.temperature, 1.0);
  EXPECT_EQ(c.top_p, 1.0);
  EXPECT_EQ(c.repetition_penalty, 1.2);
  write(dir / "generation_config.json", R"({"do_sample": true, "top_p": 1.5})");
  EXPECT_ERROR_HAS(GenerationConfig::from_pretrained(dir.str()), "generation_config.json", "top_p must be in (0, 1]");
  write(dir / "generation_config.json", R"({"eos_token_id": "x"})");
  EXPECT_ERROR_HAS(GenerationConfig::from_pretrained(dir.str()), "generation_config.json", "eos_token_id");
  EXPECT_ERROR_HAS(GenerationConfig::from_pretrained((dir / "nowhere")), "neither generation_config.json nor config.json");
}

// examples/generate: what it streams is the decode of what nn::generate returns.
std::string run_generate_example(const std::string& args, const TempDir& dir, int* rc) {
  const std::string out = dir / "stdout.txt";
  const int status = std::system((std::string(TG_GENERATE_EXAMPLE) + " " + args + " >" + out + " 2>" + (dir / "err.txt")).c_str());
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(out, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(GenerateExample, StreamsWhatTheLibraryGeneratesFromAFolder) {
  const fs::path here = fs::path(TG_TESTS_DIR) / "fixtures" / "tokenizers";
  TempDir dir;
  for (const char* name : {"tiny_llama", "tiny_gpt2"}) {
    const std::string folder = (here / name).string();
    auto tok = data::Tokenizer::from_pretrained(folder);
    auto model = nn::from_pretrained(folder);
    const std::vector<int32_t> prompt = tok.encode("Once upon a time, the");
    const auto want = nn::generate(*model, {prompt}, {.max_new_tokens = 12, .eos_token_id = GenerationConfig::from_pretrained(folder).eos_token_id})[0];
    int rc = 0;
    const std::string got = run_generate_example("--model " + folder + " --prompt 'Once upon a time, the' --max-new-tokens 12 --threads 1", dir, &rc);
    EXPECT_EQ(rc, 0) << name;
    EXPECT_EQ(got, examples::printable(tok.decode(want, /*skip_special_tokens=*/true), /*one_line=*/false) + "\n")
        << name;
  }
}

// A model with more rows than its tokenizer (the padding rows of Qwen and Llama-3 folders): what
// it generates always decodes, an id the tokenizer lacks as the unknown piece; a tokenizer with
// more ids than the model is refused before the model loads.
TEST(GenerateExample, TheTokenizerIsCheckedAgainstTheEmbedding) {
  const fs::path here = fs::path(TG_TESTS_DIR) / "fixtures" / "tokenizers";
  TempDir dir;
  auto tok = data::Tokenizer::from_pretrained((here / "tiny_llama").string());
  EXPECT_EQ(examples::decode_lenient(tok, std::vector<int32_t>{650, 1000, -1}), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  const std::vector<int32_t> hello = tok.encode("Hello", false);
  std::vector<int32_t> mixed = hello;
  mixed.push_back(650);
  EXPECT_EQ(examples::decode_lenient(tok, mixed), tok.decode(hello) + "\xEF\xBF\xBD");
  EXPECT_ERROR_HAS(examples::check_vocabulary(tok, 500, "generate", "--model", "f"), "the tokenizer has 601 ids",
                   "the model's embedding 500 rows", "resize_token_embeddings");
  examples::check_vocabulary(tok, 700, "generate", "--model", "f");
  const std::string small = dir / "small";
  nn::save_pretrained(nn::LlamaForCausalLM({.vocab_size = 500, .hidden_size = 16, .intermediate_size = 32,
                                            .num_hidden_layers = 1, .num_attention_heads = 2}),
                      small);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(here / "tiny_llama" / name, fs::path(small) / name);
  int rc = 0;
  run_generate_example("--model " + small + " --prompt hi", dir, &rc);
  EXPECT_EQ(rc, 1);
  std::ifstream err(dir / "err.txt");
  const std::string message((std::istreambuf_iterator<char>(err)), {});
  EXPECT_NE(message.find("resize_token_embeddings"), std::string::npos) << message;
  EXPECT_EQ(message.find("model: "), std::string::npos) << message;
  run_generate_example("--model " + small + " --adapter " + (dir / "none") + " --prompt hi", dir, &rc);
  EXPECT_EQ(rc, 2);
}

TEST(GenerateExample, AToyCheckpointWithAnAdapterAppliedOrMerged) {
  TempDir dir;
  nn::LlamaConfig cfg = nn::LlamaConfig::tiny();
  Generator gen(5);
  auto model = std::make_shared<nn::LlamaForCausalLM>(cfg, gen);
  nn::save_state_dict(*model, dir / "base.safetensors", {{"config", "tiny"}});
  lora_with_random_b(*model, {"q_proj", "v_proj"}, 6);
  peft::save_adapter(*model, dir / "adapter", {.target_modules = {"q_proj", "v_proj"}});
  const std::string prompt = "LOG 1";
  const auto want = nn::generate(*model, {std::vector<int32_t>(prompt.begin(), prompt.end())}, {.max_new_tokens = 20})[0];
  const std::string want_text = examples::printable(std::string(want.begin(), want.end()), /*one_line=*/false) + "\n";
  for (const char* merge : {"false", "true"}) {
    int rc = 0;
    const std::string got = run_generate_example("--model " + (dir / "base.safetensors") + " --adapter " + (dir / "adapter") +
                                                     " --merge " + merge + " --prompt '" + prompt + "' --max-new-tokens 20",
                                                 dir, &rc);
    EXPECT_EQ(rc, 0) << "--merge " << merge;
    EXPECT_EQ(got, want_text) << "--merge " << merge;
  }
  int rc = 0;
  run_generate_example("--model " + (dir / "base.safetensors") + " --prompt x --top-k 5", dir, &rc);
  EXPECT_EQ(rc, 2);  // a usage error: top-k without sampling
  run_generate_example("--model " + (dir / "base.safetensors") + " --prompt x --max-new-tokens 200", dir, &rc);
  EXPECT_EQ(rc, 1);  // past the context: generate's error
}

// --chat on a tiny model folder with tiny_llama's tokenizer and Qwen2.5's real template: two user
// turns piped in, each prompt the template's rendering of the conversation so far (the first
// reply in it), each reply what nn::generate gives for that prompt.
std::string chat_folder(const TempDir& dir, const std::vector<int32_t>& eos) {
  const fs::path tokenizers = fs::path(TG_TESTS_DIR) / "fixtures" / "tokenizers";
  const fs::path qwen = fs::path(TG_TESTS_DIR) / "fixtures" / "chat_templates" / "qwen2.5";
  const std::string folder = dir / "chat_model";
  Generator gen(3);
  nn::save_pretrained(nn::LlamaForCausalLM({.vocab_size = 601, .hidden_size = 32, .intermediate_size = 64,
                                            .num_hidden_layers = 1, .num_attention_heads = 4,
                                            .num_key_value_heads = 2, .max_position_embeddings = 512},
                                           gen),
                      folder);
  fs::copy_file(tokenizers / "tiny_llama" / "tokenizer.json", fs::path(folder) / "tokenizer.json");
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  json::Value config = json::parse(slurp(tokenizers / "tiny_llama" / "tokenizer_config.json"));
  config.set("chat_template", json::parse(slurp(qwen / "tokenizer_config.json")).at("chat_template"));
  io::write_file_atomic(folder + "/tokenizer_config.json", json::dump(config));
  json::Value ids = json::Value::array();
  for (int32_t id : eos) ids.push_back(static_cast<int64_t>(id));
  json::Value generation = json::Value::object();
  generation.set("eos_token_id", ids);
  io::write_file_atomic(folder + "/generation_config.json", json::dump(generation));
  return folder;
}

std::string chat(const std::string& args, const std::string& input, const TempDir& dir, int* rc, std::string* err) {
  io::write_file_atomic(dir / "turns.txt", input);
  const std::string out = run_generate_example(args + " <" + (dir / "turns.txt"), dir, rc);
  std::ifstream e(dir / "err.txt");
  *err = std::string(std::istreambuf_iterator<char>(e), {});
  return out;
}

TEST(GenerateExample, ChatRendersEachTurnThroughTheTemplateAndKeepsTheHistory) {
  TempDir dir;
  const std::string folder = chat_folder(dir, {2});
  auto tok = data::Tokenizer::from_pretrained(folder);
  auto model = nn::from_pretrained(folder);
  std::vector<data::ChatMessage> history = {{"system", "Be brief."}};
  std::string want_out;
  std::vector<std::string> prompts;
  for (const char* turn : {"Hello there", "And again?"}) {
    history.push_back({"user", turn});
    prompts.push_back(tok.apply_chat_template(history, {.add_generation_prompt = true}));
    const std::vector<int32_t> ids = tok.encode(prompts.back(), false);
    std::vector<int32_t> reply = nn::generate(*model, {ids}, {.max_new_tokens = 5, .eos_token_id = {2}})[0];
    reply.erase(reply.begin(), reply.begin() + static_cast<int64_t>(ids.size()));
    if (!reply.empty() && reply.back() == 2) reply.pop_back();
    const std::string text = examples::decode_lenient(tok, reply);
    want_out += examples::printable(text, /*one_line=*/false) + "\n";
    history.push_back({"assistant", text});
  }
  EXPECT_EQ(prompts[0], "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n"
                        "<|im_start|>assistant\n");
  int rc = 0;
  std::string err;
  const std::string got = chat("--model " + folder + " --chat --system 'Be brief.' --print-prompt --max-new-tokens 5 "
                               "--threads 1",
                               "Hello there\n\nAnd again?\n", dir, &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(got, want_out);
  for (const std::string& p : prompts) EXPECT_NE(err.find(p), std::string::npos) << "missing prompt:\n" << p << "\n" << err;
  EXPECT_NE(prompts[1].find("<|im_start|>assistant\n" + history[2].content + "<|im_end|>"), std::string::npos);
}

// A reply ends at the first of generation_config.json's EOS ids (the template's end of turn);
// the id is not part of the reply the history keeps.
TEST(GenerateExample, ChatStopsAtTheGenerationConfigsEndOfTurn) {
  TempDir dir;
  std::string folder = chat_folder(dir, {2});
  auto tok = data::Tokenizer::from_pretrained(folder);
  const std::vector<data::ChatMessage> first = {{"user", "Hi"}};
  const std::vector<int32_t> ids = tok.encode(tok.apply_chat_template(first, {.add_generation_prompt = true}), false);
  const int32_t greedy_first = nn::generate(*nn::from_pretrained(folder), {ids}, {.max_new_tokens = 1})[0].back();
  fs::remove_all(folder);
  folder = chat_folder(dir, {greedy_first});  // the model's first reply token now ends the turn
  int rc = 0;
  std::string err;
  const std::string got =
      chat("--model " + folder + " --chat --print-prompt --max-new-tokens 8 --threads 1", "Hi\nBye\n", dir, &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(got.substr(0, 1), "\n") << "the first reply is not empty: " << got;
  EXPECT_NE(err.find("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\nBye"),
            std::string::npos)
      << err;
}

TEST(GenerateExample, ChatErrorsNameWhatIsMissing) {
  const fs::path tokenizers = fs::path(TG_TESTS_DIR) / "fixtures" / "tokenizers";
  TempDir dir;
  int rc = 0;
  std::string err;
  chat("--model " + (tokenizers / "tiny_llama").string() + " --chat", "Hi\n", dir, &rc, &err);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("has no chat template"), std::string::npos) << err;
  EXPECT_EQ(err.find("model: "), std::string::npos) << "the model was loaded first:\n" << err;
  const std::string folder = chat_folder(dir, {2});
  chat("--model " + folder + " --chat --prompt hi", "", dir, &rc, &err);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("--chat reads the user's turns from stdin"), std::string::npos) << err;
  chat("--model " + folder + " --prompt hi --system x", "", dir, &rc, &err);
  EXPECT_EQ(rc, 2);
  chat("--model " + folder + " --chat --max-new-tokens 500 --threads 1", "Hi\n", dir, &rc, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("exceeds the model's context of 512 tokens"), std::string::npos) << err;
  // A line that is not UTF-8 (a Latin-1 terminal's "café") is named, not sent as other characters.
  chat("--model " + folder + " --chat --max-new-tokens 1 --threads 1", "Hi\ncaf\xE9\n", dir, &rc, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("stdin line 2 is not text: invalid UTF-8 (byte 0xe9) at byte 3"), std::string::npos) << err;
}

// Greedy ids transformers' generate gave on the tokenizer fixtures' tiny models, one prompt and
// left-padded batches (tests/fixtures/generate/make_fixtures.py writes them on a machine with
// transformers: the GPU machine).
TEST(GenerateFixtures, GreedyEqualsTransformersGenerate) {
  const fs::path here = fs::path(TG_TESTS_DIR) / "fixtures";
  const fs::path expected = here / "generate" / "expected.json";
  if (!fs::exists(expected))
    GTEST_SKIP() << expected << " is not made yet: run tests/fixtures/generate/make_fixtures.py with transformers";
  const std::vector<uint8_t> bytes = io::read_file(expected.string());
  const json::Value root = json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  auto ids = [](const json::Value& v) {
    std::vector<int32_t> out;
    for (const json::Value& x : v.as_array()) out.push_back(static_cast<int32_t>(x.as_int()));
    return out;
  };
  const std::vector<json::Value>& cases = root.at("cases").as_array();
  ASSERT_GE(cases.size(), 4u);
  for (const json::Value& c : cases) {
    const std::string name = c.at("name").as_string();
    SCOPED_TRACE(name);
    auto model = nn::from_pretrained((here / "tokenizers" / c.at("model").as_string()).string());
    GenerationConfig cfg{.max_new_tokens = c.at("max_new_tokens").as_int(),
                         .repetition_penalty = c.at("repetition_penalty").as_double(),
                         .eos_token_id = ids(c.at("eos_token_id"))};
    std::vector<std::vector<int32_t>> prompts, want;
    for (const json::Value& p : c.at("prompts").as_array()) prompts.push_back(ids(p));
    for (const json::Value& w : c.at("sequences").as_array()) want.push_back(ids(w));
    EXPECT_EQ(nn::generate(*model, prompts, cfg), want);
    cfg.cache_implementation = "static";
    EXPECT_EQ(nn::generate(*model, prompts, cfg), want) << "static cache";
  }
}

// The same code on the GPU: greedy ids as on the CPU (float32), and the bfloat16 cached forward
// against its full recompute.
TEST(GenerateCuda, GreedyOnTheGpuEqualsTheCpu) {
  TG_REQUIRE_CUDA();
  for (int family = 0; family < 2; ++family) {
    std::shared_ptr<nn::Module> m = family == 0 ? std::shared_ptr<nn::Module>(llama()) : gpt2();
    const std::vector<std::vector<int32_t>> prompts = {random_ids(5, 51), random_ids(2, 52), random_ids(9, 53)};
    const GenerationConfig cfg{.max_new_tokens = 16};
    const auto cpu = nn::generate(*m, prompts, cfg);
    m->to(Device::cuda());
    EXPECT_EQ(nn::generate(*m, prompts, cfg), cpu) << "family " << family;
    GenerationConfig sample{.max_new_tokens = 16, .do_sample = true, .temperature = 0.9, .top_k = 20, .top_p = 0.9};
    EXPECT_EQ(nn::generate(*m, prompts, sample).size(), prompts.size());
  }
}

TEST(GenerateCuda, CachedForwardEqualsFullRecomputeBFloat16) {
  TG_REQUIRE_CUDA();
  auto m = llama();  // head_dim 8: the composition; the flash kernels take 32, 64, 128
  m->to(kBFloat16, Device::cuda());
  NoGradGuard no_grad;
  m->eval();
  const std::vector<int32_t> ids = random_ids(12, 61);
  nn::KVCache cache(2, 1, 2, 8, 12, {kBFloat16, Device::cuda()});
  for (int64_t t = 0; t < 12; ++t) {
    Tensor h = m->model->forward(to(ids_tensor({ids[t]}), Device::cuda()), cache);
    Tensor got = to(reshape(m->lm_head->forward(h), {61}), kFloat32, Device::cpu());
    Tensor full = m->forward(to(ids_tensor(std::vector<int32_t>(ids.begin(), ids.begin() + t + 1)), Device::cuda()));
    EXPECT_TENSOR_NEAR(got, to(reshape(slice(full, 1, t, t + 1), {61}), kFloat32, Device::cpu()), 0.1, 0.1);
  }
}


// ---- the static cache and its CUDA graph (issue 26) ----

// Every decode step against the whole cache, masked, with its inputs in device tensors: the
// tokens of the dynamic cache, for both families, padded batches, a penalty and sampling.
TEST(Generate, StaticCacheGivesTheDynamicCachesTokens) {
  for (int family = 0; family < 2; ++family) {
    std::shared_ptr<nn::Module> m = family == 0 ? std::shared_ptr<nn::Module>(llama()) : gpt2();
    const std::vector<std::vector<int32_t>> prompts = {random_ids(3, 21), random_ids(9, 22), random_ids(1, 23)};
    for (GenerationConfig cfg : {GenerationConfig{.max_new_tokens = 14, .repetition_penalty = 1.3},
                                 GenerationConfig{.max_new_tokens = 14, .do_sample = true, .top_k = 8, .seed = 5}}) {
      const auto dynamic = nn::generate(*m, prompts, cfg);
      cfg.cache_implementation = "static";
      EXPECT_EQ(nn::generate(*m, prompts, cfg), dynamic) << "family " << family;
    }
  }
}

TEST(KVCache, StaticDecodeIsChecked) {
  auto m = llama();
  NoGradGuard no_grad;
  m->eval();
  nn::KVCache cache(2, 1, 2, 8, 6, {});
  cache.enable_static_decode();
  m->model->forward(ids_tensor({1, 2}), cache);  // a prompt: the dynamic layout
  EXPECT_ERROR_HAS(m->model->forward(ids_tensor({3}), cache), "LlamaModel", "static decode step of column 2",
                   "upload_decode_step() first");
  cache.upload_decode_step();
  m->model->forward(ids_tensor({3}), cache);
  EXPECT_EQ(cache.length(), 3);
  nn::KVCache late(2, 1, 2, 8, 6, {});
  m->model->forward(ids_tensor({1}), late);
  EXPECT_ERROR_HAS(late.enable_static_decode(), "KVCache", "before the first cached forward");
  EXPECT_ERROR_HAS(late.upload_decode_step(), "upload_decode_step() wants enable_static_decode() first");
}

TEST(Generate, CudaGraphWantsTheStaticCacheAndAGpu) {
  auto m = llama();
  EXPECT_ERROR_HAS(nn::generate(*m, {{1, 2}}, {.cuda_graph = true}), "GenerationConfig",
                   "cuda_graph wants cache_implementation 'static'");
  GenerationConfig cfg{.cache_implementation = "static", .cuda_graph = true};
  EXPECT_ERROR_HAS(nn::generate(*m, {{1, 2}}, cfg), "generate", "cuda_graph wants the model on a GPU, it is on cpu");
  EXPECT_ERROR_HAS(nn::generate(*m, {{1, 2}}, {.cache_implementation = "hybrid"}), "GenerationConfig",
                   "cache_implementation 'hybrid' is not supported");
}

// The decode step replayed from a CUDA graph against the same steps run eagerly on a static cache:
// the logits of every step bitwise, and generate's tokens (greedy and sampled) the same.
TEST(GenerateCuda, GraphReplayedDecodeIsBitwiseTheStaticDecode) {
  TG_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  auto m = llama();
  m->to(kBFloat16, gpu);
  const std::vector<std::vector<int32_t>> prompts = {random_ids(5, 71), random_ids(2, 72), random_ids(8, 73)};
  for (GenerationConfig cfg : {GenerationConfig{.max_new_tokens = 12, .cache_implementation = "static"},
                               GenerationConfig{.max_new_tokens = 12, .do_sample = true, .seed = 2,
                                                .cache_implementation = "static"}}) {
    const auto eager = nn::generate(*m, prompts, cfg);
    cfg.cuda_graph = true;
    EXPECT_EQ(nn::generate(*m, prompts, cfg), eager);
  }

  NoGradGuard no_grad;
  m->eval();
  const std::vector<int64_t> padding = {0, 2};
  nn::KVCache eager(2, 2, 2, 8, 10, {kBFloat16, gpu}, padding), graphed(2, 2, 2, 8, 10, {kBFloat16, gpu}, padding);
  eager.enable_static_decode();
  graphed.enable_static_decode();
  const Tensor prompt = to(from_vector(std::vector<int64_t>{4, 5, 6, 0, 0, 7}, {2, 3}), gpu);
  m->model->forward(prompt, eager);
  m->model->forward(prompt, graphed);
  Tensor ids = Tensor::empty({2, 1}, {kInt64, gpu}), logits;
  auto step = [&](nn::KVCache& cache) { return m->lm_head->forward(m->model->forward(ids, cache)); };
  cuda::CUDAGraph graph;
  for (int t = 0; t < 6; ++t) {
    copy_(ids, from_vector(std::vector<int64_t>{10 + t, 30 - t}, {2, 1}));
    eager.upload_decode_step();
    const Tensor want = to(step(eager), Device::cpu());
    graphed.upload_decode_step();
    if (t == 0) logits = step(graphed);  // the warm-up a capture needs
    if (t == 1) graph.capture([&] { logits = step(graphed); });
    if (t >= 2) graphed.advance(1);
    if (t >= 1) graph.replay();
    EXPECT_TENSOR_EQ(to(logits, Device::cpu()), want) << "step " << t;
  }
}

}  // namespace
}  // namespace tg::test
