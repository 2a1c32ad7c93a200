// GRPO (train/grpo_trainer.h): its loss of every loss_type, with clipping and the KL term, on the
// fused token log-probs of a float64 tiny Llama against TRL's formulas computed here from the
// materialised logits, every LoRA gradient against finite differences; the group advantages; the
// built-in rewards; a reward function that throws or returns NaN named with its row; a run with
// the tiny Llama fixture's tokenizer that raises the reward of "answer with the letter a"; a
// resumed run (num_iterations 2) bitwise the uninterrupted one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "nn/models/pretrained.h"
#include "tests/preference_test_util.h"
#include "tests/test_support.h"
#include "train/grpo_trainer.h"
#include "train/preference_losses.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using train::GRPOConfig;

// TRL's GRPO loss (grpo_trainer.py _compute_loss) on host numbers: per-token logps, old, ref, mask.
double grpo_host(const GRPOConfig& c, const std::vector<double>& lp, const std::vector<double>& old,
                 const std::vector<double>& ref, const std::vector<double>& mask, const std::vector<double>& adv,
                 int64_t T, double step_tokens) {
  const int64_t B = static_cast<int64_t>(adv.size());
  const double low = 1 - c.epsilon, high = 1 + (c.epsilon_high > 0 ? c.epsilon_high : c.epsilon);
  double total = 0, tokens = 0, seq_means = 0;
  for (int64_t b = 0; b < B; ++b) {
    double row = 0, row_tokens = 0;
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b * T + t);
      if (mask[i] == 0) continue;
      const double r = std::exp(lp[i] - old[i]), clipped = std::clamp(r, low, high);
      double per = -std::min(r * adv[static_cast<size_t>(b)], clipped * adv[static_cast<size_t>(b)]);
      if (c.beta > 0) per += c.beta * (std::exp(ref[i] - lp[i]) - (ref[i] - lp[i]) - 1);
      row += per, row_tokens += 1;
    }
    total += row, tokens += row_tokens, seq_means += row / std::max(row_tokens, 1.0);
  }
  if (c.loss_type == "grpo") return seq_means / static_cast<double>(B);
  if (c.loss_type == "bnpo") return total / std::max(tokens, 1.0);
  if (c.loss_type == "dr_grpo") return total / static_cast<double>(B * c.max_completion_length);
  return total / step_tokens;  // dapo
}

TEST(GRPOLoss, MatchesTrlsFormulaAndFiniteDifferencesInFloat64) {
  auto model = test::lora_llama(kFloat64, 0.3);
  const data::PreferenceDataset pairs(test::some_pairs());
  const std::vector<int64_t> rows = {0, 1, 2};
  const data::PreferenceBatch b = pairs.rows_batch(rows, Device::cpu());  // 6 completions
  const int64_t B = b.ids.size(0), T = b.ids.size(1);
  const double temperature = 0.8;
  // the generating policy: the adapters' B scaled by 0.9 (ratios a few % from 1)
  std::vector<double> old_v;
  {
    NoGradGuard g;
    for (auto& [path, l] : peft::lora_layers(*model)) copy_(l->lora_B->weight, mul(l->lora_B->weight, 0.9));
    old_v = test::host_token_log_probs(*model, b.ids, b.labels, false, temperature);
    for (auto& [path, l] : peft::lora_layers(*model)) copy_(l->lora_B->weight, div(l->lora_B->weight, 0.9));
  }
  const std::vector<double> ref_v = test::host_token_log_probs(*model, b.ids, b.labels, true, temperature);
  std::vector<double> mask_v(static_cast<size_t>(B * T), 0.0);
  const std::vector<int64_t> lb = b.labels.to_vector<int64_t>();
  for (int64_t i = 0; i < B * T; ++i) mask_v[static_cast<size_t>(i)] = i % T + 1 < T && lb[static_cast<size_t>(i + 1)] != -100;
  const std::vector<double> adv = {1.2, -0.7, 0.3, -1.5, 0.9, -0.2};
  const Tensor old = from_vector(old_v, {B, T}), ref = from_vector(ref_v, {B, T}), mask = from_vector(mask_v, {B, T});
  const double step_tokens = 40;  // other micro-batches' tokens too
  for (GRPOConfig c : {GRPOConfig{.loss_type = "grpo"}, GRPOConfig{.beta = 0.04, .loss_type = "bnpo"},
                       GRPOConfig{.max_completion_length = 9, .beta = 0.1, .loss_type = "dr_grpo"},
                       GRPOConfig{.beta = 0.04, .epsilon = 0.02, .epsilon_high = 0.03}}) {
    SCOPED_TRACE(c.loss_type);
    model->zero_grad();
    const train::PreferenceLoss loss = train::grpo_loss(
        c, {.logps = model->token_log_probs(b.ids, b.labels, Tensor(), temperature), .old_logps = old,
            .ref_logps = ref, .mask = mask, .advantages = adv, .completion_tokens = b.completion_tokens,
            .step_tokens = static_cast<int64_t>(step_tokens)});
    auto host = [&] {
      return grpo_host(c, test::host_token_log_probs(*model, b.ids, b.labels, false, temperature), old_v, ref_v, mask_v,
                       adv, T, step_tokens);
    };
    loss.loss.backward();
    const double want = host();
    EXPECT_NEAR(loss.loss.item(), want, 1e-12 * std::max(1.0, std::abs(want)));
    if (c.epsilon == 0.02) EXPECT_GT(loss.metrics.at("clip_ratio/region_mean"), 0.0);  // clipping is exercised
    const double eps = 1e-6;
    for (const Tensor& w : model->trainable_parameters()) {
      const std::vector<double> got = w.grad().to_vector<double>();
      double* v = w.data_ptr<double>();
      for (int64_t j = 0; j < w.numel(); ++j) {
        const double keep = v[j];
        v[j] = keep + eps;
        const double up = host();
        v[j] = keep - eps;
        const double down = host();
        v[j] = keep;
        EXPECT_NEAR(got[static_cast<size_t>(j)], (up - down) / (2 * eps), 1e-7) << "element " << j;
      }
    }
  }
}

TEST(GRPOLoss, AdvantagesAreNormalisedWithinEachGroup) {
  const std::vector<double> rewards = {1, 0, 0, 1, 2, 2, 2, 2};
  int64_t zero_std = 0;
  const double s = std::sqrt(1.0 / 3.0);  // the first group's std, Bessel-corrected
  std::vector<double> a = train::grpo_advantages({.num_generations = 4}, rewards, zero_std);
  EXPECT_NEAR(a[0], 0.5 / (s + 1e-4), 1e-12);
  EXPECT_NEAR(a[1], -0.5 / (s + 1e-4), 1e-12);
  EXPECT_EQ(a[5], 0.0);
  EXPECT_EQ(zero_std, 4);
  a = train::grpo_advantages({.num_generations = 4, .scale_rewards = "none"}, rewards, zero_std);
  EXPECT_EQ(a[0], 0.5);
  const double all = std::sqrt((4 * 0.75 * 0.75 + 2 * 0.25 * 0.25 + 2 * 1.25 * 1.25 + 0.0) / 7.0);  // mean 1.25
  a = train::grpo_advantages({.num_generations = 4, .scale_rewards = "batch"}, rewards, zero_std);
  EXPECT_NEAR(a[0], 0.5 / (all + 1e-4), 1e-12);
  EXPECT_ERROR_HAS(train::grpo_advantages({.num_generations = 3}, rewards, zero_std), "whole groups");
}

TEST(GRPORewards, BuiltInsScoreACompletion) {
  const data::PromptExample p{{1}, "Q", json::parse(R"({"answer": " 42 "})"), "'x' line 1"};
  const std::vector<int32_t> ids = {5, 6, 7};
  auto score = [&](const train::RewardFunction& f, std::string_view text) { return f.fn({p, text, ids, true}); };
  EXPECT_EQ(score(train::rewards::exact_match(), "42\n"), 1.0);
  EXPECT_EQ(score(train::rewards::exact_match(), "43"), 0.0);
  EXPECT_ERROR_HAS(score(train::rewards::exact_match("solution"), "42"), "exact_match", "no string \"solution\"");
  EXPECT_EQ(score(train::rewards::regex_match(R"(\d+\s*$)"), "it is 42"), 1.0);
  EXPECT_EQ(score(train::rewards::regex_match(R"(^a)"), "ba"), 0.0);
  EXPECT_ERROR_HAS(train::rewards::regex_match("(unclosed"), "(unclosed");
  EXPECT_DOUBLE_EQ(score(train::rewards::length_penalty(6, 0.5), ""), -0.25);
}

// Stops the run after a given step (a Ctrl-C flag would, in a program).
struct StopAt : train::TrainerCallback {
  explicit StopAt(int64_t step) : step(step) {}
  void on_step_end(const train::TrainerState& s, train::TrainerControl& c) override { c.should_training_stop = s.global_step == step; }
  int64_t step;
};

const fs::path kTinyLlama = fs::path(TG_TESTS_DIR) / "fixtures" / "tokenizers" / "tiny_llama";

// Prompts "<n> say a:" and a reward: the share of the completion's letters that are 'a'.
std::vector<data::PromptExample> a_prompts(const data::Tokenizer& tok, const TempDir& dir) {
  std::ofstream out(dir / "prompts.jsonl");
  for (int i = 0; i < 16; ++i) out << R"({"prompt": ")" << i << R"( say a:", "answer": "a"})" << "\n";
  out.close();
  return data::read_prompt_jsonl(dir / "prompts.jsonl", tok);
}

train::RewardFunction share_of_a() {
  return {"share_of_a", [](const train::RewardInput& in) {
            double letters = 0, as = 0;
            for (char ch : in.completion)
              if (std::isalpha(static_cast<unsigned char>(ch))) letters += 1, as += ch == 'a';
            return letters > 0 ? as / letters : 0.0;
          }};
}

// The tiny Llama fixture's shape (its tokenizer's 601 ids), weights drawn with std 0.3: the
// fixture's own (0.02) leave logits too flat for any adapter to change what is sampled.
std::shared_ptr<nn::CausalLM> tiny_llama_with_lora() {
  nn::LlamaConfig c;
  c.vocab_size = 601;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 128;
  c.initializer_range = 0.3;
  Generator gen(3);
  auto model = std::make_shared<nn::LlamaForCausalLM>(c, gen);
  peft::apply_lora(*model, {.r = 8, .lora_alpha = 16, .target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"}}, gen);
  return model;
}

train::TrainingArguments grpo_args(const TempDir& dir, int64_t steps) {
  return {.output_dir = dir / "out", .overwrite_output_dir = true, .learning_rate = 3e-2, .max_steps = steps,
          .per_device_train_batch_size = 8, .logging_steps = 1, .save_steps = 0, .seed = 5, .use_cpu = true, .disable_tqdm = true};
}

TEST(GRPOTrainer, RaisesTheRewardOfAVerifiableTask) {
  TempDir dir;
  const data::Tokenizer tok = data::Tokenizer::from_pretrained(kTinyLlama.string());
  train::TrainingArguments a = grpo_args(dir, 60);
  a.learning_rate = 0.1;
  a.per_device_train_batch_size = 16;
  // "answer with the letter a": the share of the completion's tokens that hold an 'a' (28 of the 600)
  const train::RewardFunction tokens_with_a{"tokens_with_a", [&tok](const train::RewardInput& in) {
    double n = 0, hits = 0;
    for (int32_t id : in.completion_ids) n += 1, hits += tok.decode(std::vector<int32_t>{id}).find('a') != std::string::npos;
    return n > 0 ? hits / n : 0.0;
  }};
  train::GRPOTrainer t(tiny_llama_with_lora(), tok, a_prompts(tok, dir), {tokens_with_a}, a,
                       {.num_generations = 8, .max_completion_length = 6, .beta = 0.02});
  t.train();
  std::vector<double> reward;
  for (const train::LogEntry& e : t.state().log_history)
    if (e.has("reward")) reward.push_back(e.at("reward"));
  ASSERT_EQ(reward.size(), 60u);
  double first = 0, final = 0;  // about 0.02 and 0.35
  for (int i = 0; i < 10; ++i) first += reward[i] / 10, final += reward[reward.size() - 1 - i] / 10;
  EXPECT_GT(final, first + 0.15) << "first steps " << first << ", last steps " << final;
  for (const char* key : {"reward_std", "frac_reward_zero_std", "rewards/tokens_with_a/mean", "completions/mean_length",
                          "completions/clipped_ratio", "kl", "clip_ratio/region_mean", "generation_seconds",
                          "training_seconds"})
    EXPECT_TRUE(t.state().log_history.back().has(key)) << key;
}

TEST(GRPOTrainer, ResumedRunIsBitwiseTheUninterruptedOne) {
  TempDir dir;
  const data::Tokenizer tok = data::Tokenizer::from_pretrained(kTinyLlama.string());
  const auto prompts = a_prompts(tok, dir);
  const GRPOConfig c{.num_generations = 4, .max_completion_length = 4, .num_iterations = 2, .epsilon_high = 0.28};
  auto full = tiny_llama_with_lora();
  train::TrainingArguments a = grpo_args(dir, 4);
  a.output_dir = dir / "full";
  a.gradient_accumulation_steps = 2;
  a.per_device_train_batch_size = 4;
  train::GRPOTrainer(full, tok, prompts, {share_of_a()}, a, c).train();
  auto first = tiny_llama_with_lora();
  a.output_dir = dir / "halves";
  train::GRPOTrainer interrupted(first, tok, prompts, {share_of_a()}, a, c);
  interrupted.add_callback(std::make_shared<StopAt>(2));  // a checkpoint at the generation's end
  interrupted.train();
  auto second = tiny_llama_with_lora();
  a.resume_from_checkpoint = "latest";
  train::GRPOTrainer(second, tok, prompts, {share_of_a()}, a, c).train();
  auto values = [](nn::Module& m) {
    std::vector<float> out;
    for (const Tensor& p : m.trainable_parameters())
      for (float v : p.to_vector<float>()) out.push_back(v);
    return out;
  };
  EXPECT_EQ(values(*second), values(*full));
}

TEST(GRPOTrainer, BadRewardsAndSettingsAreNamed) {
  TempDir dir;
  const data::Tokenizer tok = data::Tokenizer::from_pretrained(kTinyLlama.string());
  const auto prompts = a_prompts(tok, dir);
  const GRPOConfig c{.num_generations = 4, .max_completion_length = 3};
  const train::RewardFunction boom{"boom", [](const train::RewardInput&) -> double { throw std::runtime_error("no"); }};
  EXPECT_ERROR_HAS(train::GRPOTrainer(tiny_llama_with_lora(), tok, prompts, {boom}, grpo_args(dir, 1), c).train(),
                   "reward function 'boom' on", "line", "(prompt row", "completion 0 of 4", "threw: no");
  const train::RewardFunction nan{"nan", [](const train::RewardInput&) { return NAN; }};
  EXPECT_ERROR_HAS(train::GRPOTrainer(tiny_llama_with_lora(), tok, prompts, {nan}, grpo_args(dir, 1), c).train(),
                   "reward function 'nan'", "returned nan");
  train::TrainingArguments odd = grpo_args(dir, 1);
  odd.per_device_train_batch_size = 6;
  EXPECT_ERROR_HAS(train::GRPOTrainer(tiny_llama_with_lora(), tok, prompts, {share_of_a()}, odd, c),
                   "per_device_train_batch_size 6", "multiple of num_generations 4");
  EXPECT_ERROR_HAS(train::GRPOTrainer(tiny_llama_with_lora(), tok, prompts, {}, grpo_args(dir, 1), c),
                   "no reward function");
  EXPECT_ERROR_HAS(train::GRPOTrainer(tiny_llama_with_lora(), tok, prompts, {share_of_a(), share_of_a()},
                                      grpo_args(dir, 1), c),
                   "two reward functions are named 'share_of_a'");
  EXPECT_ERROR_HAS(train::GRPOTrainer(tiny_llama_with_lora(), tok, prompts, {share_of_a()}, grpo_args(dir, 1),
                                      {.num_generations = 4, .max_completion_length = 500}),
                   "max_completion_length 500", "context 128");
  EXPECT_ERROR_HAS(train::GRPOTrainer(nn::from_pretrained(kTinyLlama.string()), tok, prompts, {share_of_a()},
                                      grpo_args(dir, 1), {.num_generations = 4, .max_completion_length = 3, .beta = 0.1}),
                   "GRPOTrainer", "no LoRA layer", "beta 0");
  EXPECT_ERROR_HAS((GRPOConfig{.num_generations = 1}.validate()), "GRPOConfig", "num_generations must be >= 2");
  EXPECT_ERROR_HAS((GRPOConfig{.loss_type = "cispo"}.validate()), "loss_type 'cispo' is not implemented");
  EXPECT_ERROR_HAS((GRPOConfig{.scale_rewards = "yes"}.validate()), "scale_rewards");
}

}  // namespace
}  // namespace tg
