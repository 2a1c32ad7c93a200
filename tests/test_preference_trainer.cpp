// The preference trainers (train/preference_trainer.h, train/kto_trainer.h) on a tiny Llama with
// LoRA on the CPU: DPO on a synthetic preference drives rewards/accuracies to 1 and logs TRL's
// names, a resumed run is bitwise the uninterrupted one, the precomputed reference equals the
// one of the step, CPO / SimPO / ORPO / KTO learn the preference, and what cannot work is refused
// by name before training.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "nn/models/llama.h"
#include "tests/preference_test_util.h"
#include "tests/test_support.h"
#include "train/kto_trainer.h"
#include "train/preference_trainer.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using train::LogEntry;
using train::TrainingArguments;

// Prompts of 2-4 tokens; the chosen completion continues t -> 3t + 1 (mod V) from the prompt's
// last token, the rejected one t -> t + 7: a preference a LoRA adapter can learn.
std::vector<data::PreferencePair> synthetic_pairs(int n = 24) {
  std::vector<data::PreferencePair> out;
  for (int i = 0; i < n; ++i) {
    data::PreferencePair p;
    for (int t = 0; t < 2 + i % 3; ++t) p.prompt.push_back(3 + (i * 5 + t * 11) % 29);
    int32_t c = p.prompt.back(), r = p.prompt.back();
    for (int t = 0; t < 3; ++t) {
      c = (c * 3 + 1) % test::kPrefVocab;
      r = (r + 7) % test::kPrefVocab;
      p.chosen.push_back(c);
      p.rejected.push_back(r);
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<data::UnpairedExample> synthetic_unpaired(int n = 24) {
  std::vector<data::UnpairedExample> out;
  for (const data::PreferencePair& p : synthetic_pairs(n / 2)) {
    out.push_back({p.prompt, p.chosen, true});
    out.push_back({p.prompt, p.rejected, false});
  }
  return out;
}

TrainingArguments args_in(const TempDir& dir, int64_t max_steps) {
  return {.output_dir = dir / "out", .learning_rate = 2e-2, .max_steps = max_steps, .per_device_train_batch_size = 4,
          .per_device_eval_batch_size = 8, .logging_steps = 1, .save_steps = 0, .seed = 3, .use_cpu = true,
          .disable_tqdm = true};
}

// The value of `key` in the last log row that has it.
double last(const train::TrainerState& s, const std::string& key) {
  for (auto it = s.log_history.rbegin(); it != s.log_history.rend(); ++it)
    if (it->has(key)) return it->at(key);
  ADD_FAILURE() << "no log row has " << key;
  return NAN;
}

std::vector<float> trainable_values(nn::Module& m) {
  std::vector<float> out;
  for (const Tensor& p : m.trainable_parameters())
    for (float v : p.to_vector<float>()) out.push_back(v);
  return out;
}

// Stops the run after a given step (a Ctrl-C flag would, in a program).
struct StopAt : train::TrainerCallback {
  explicit StopAt(int64_t step) : step(step) {}
  void on_step_end(const train::TrainerState& s, train::TrainerControl& c) override { c.should_training_stop = s.global_step == step; }
  int64_t step;
};

TEST(DPOTrainer, LearnsASyntheticPreferenceAndLogsTrlsNames) {
  TempDir dir;
  auto model = test::lora_llama(kFloat32, 0.0, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  const auto pairs = synthetic_pairs();
  train::DPOTrainer trainer(model, pairs, args_in(dir, 40), {.beta = 0.1}, pairs);
  const LogEntry before = trainer.evaluate();
  EXPECT_NEAR(before.at("eval_rewards/margins"), 0.0, 1e-5);  // the policy is the reference: B is zero
  trainer.train();
  const LogEntry after = trainer.evaluate();
  EXPECT_EQ(after.at("eval_rewards/accuracies"), 1.0);
  EXPECT_GT(after.at("eval_rewards/margins"), 0.5);
  EXPECT_LT(after.at("eval_loss"), 0.5 * before.at("eval_loss"));
  for (const char* key : {"loss", "grad_norm", "learning_rate", "rewards/chosen", "rewards/rejected",
                          "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"})
    EXPECT_TRUE(std::isfinite(last(trainer.state(), key))) << key;
  std::ifstream jsonl(dir / "out/log.jsonl");
  std::stringstream text;
  text << jsonl.rdbuf();
  EXPECT_NE(text.str().find("\"rewards/accuracies\""), std::string::npos);
  EXPECT_NE(text.str().find("\"eval_rewards/margins\""), std::string::npos);
}

TEST(DPOTrainer, ResumedRunIsBitwiseTheUninterruptedOne) {
  TempDir dir;
  const auto pairs = synthetic_pairs();
  auto full = test::lora_llama(kFloat32, 0.0);
  TrainingArguments a = args_in(dir, 6);
  a.output_dir = dir / "full";
  a.gradient_accumulation_steps = 2;
  train::DPOTrainer(full, pairs, a, {.loss_type = {"sigmoid", "ipo"}}).train();

  auto first = test::lora_llama(kFloat32, 0.0);
  a.output_dir = dir / "halves";
  train::DPOTrainer interrupted(first, pairs, a, {.loss_type = {"sigmoid", "ipo"}});
  interrupted.add_callback(std::make_shared<StopAt>(3));  // as Ctrl-C would: a checkpoint, then the end
  interrupted.train();
  auto second = test::lora_llama(kFloat32, 0.0);
  a.resume_from_checkpoint = "latest";
  train::DPOTrainer resumed(second, pairs, a, {.loss_type = {"sigmoid", "ipo"}});
  resumed.train();
  EXPECT_EQ(trainable_values(*second), trainable_values(*full));

  // another objective or other pairs are refused by name
  a.max_steps = 7;
  EXPECT_ERROR_HAS(train::DPOTrainer(test::lora_llama(kFloat32, 0.0), pairs, a, {.beta = 0.2}).train(),
                   "was trained with another objective", "DPOConfig");
  auto fewer = synthetic_pairs(20);
  EXPECT_ERROR_HAS(train::DPOTrainer(test::lora_llama(kFloat32, 0.0), fewer, a, {.loss_type = {"sigmoid", "ipo"}}).train(),
                   "not the one the checkpoint trained on");
}

TEST(DPOTrainer, PrecomputedReferenceIsTheStepsReference) {
  TempDir dir;
  const auto pairs = synthetic_pairs(8);
  auto run = [&](bool precompute) {
    auto model = test::lora_llama(kFloat32, 0.3);  // the adapters differ from the base from the start
    TrainingArguments a = args_in(dir, 1);
    a.output_dir = dir / (precompute ? "pre" : "step");
    train::DPOTrainer t(model, pairs, a, {.precompute_ref_log_probs = precompute, .precompute_ref_batch_size = 3}, pairs);
    return t.evaluate();
  };
  const LogEntry step = run(false), pre = run(true);
  for (const char* key : {"eval_loss", "eval_rewards/chosen", "eval_rewards/rejected", "eval_logps/chosen"})
    EXPECT_NEAR(pre.at(key), step.at(key), 1e-5) << key;
}

TEST(DPOTrainer, WhatCannotWorkIsRefusedByName) {
  TempDir dir;
  const auto pairs = synthetic_pairs(8);
  Generator gen(1);
  auto full = std::make_shared<nn::LlamaForCausalLM>(test::preference_config(), gen);  // no LoRA: every weight trains
  EXPECT_ERROR_HAS(train::DPOTrainer(full, pairs, args_in(dir, 2)), "DPOTrainer", "has no LoRA layer",
                   "precompute_ref_log_probs");
  train::DPOTrainer precomputed(full, pairs, args_in(dir, 1), {.precompute_ref_log_probs = true});  // the model as given
  auto saved = std::make_shared<nn::LlamaForCausalLM>(test::preference_config(), gen);
  peft::apply_lora(*saved, {.target_modules = {"up_proj"}, .modules_to_save = {"lm_head"}});
  EXPECT_ERROR_HAS(train::DPOTrainer(saved, pairs, args_in(dir, 2)), "the trainable weight 'lm_head.weight'",
                   "is not a LoRA adapter");
  const std::vector<data::PreferencePair> long_pair = {{std::vector<int32_t>(20, 3), std::vector<int32_t>(9, 4), {5}}};
  EXPECT_ERROR_HAS(train::DPOTrainer(test::lora_llama(kFloat32, 0.0), pairs, args_in(dir, 2), {.max_length = 0}, long_pair),
                   "a pair has 29 tokens, the model's context is 24", "max_length");
  const std::vector<data::PreferencePair> short_max = {{{3, 4, 5}, {6}, {7}}};
  EXPECT_ERROR_HAS(train::DPOTrainer(test::lora_llama(kFloat32, 0.0), short_max, args_in(dir, 2), {.max_length = 3}),
                   "no training pairs", "1 left out");
  TrainingArguments graph = args_in(dir, 2);
  graph.use_cpu = false;
  graph.cuda_graph = "on";
  if (default_device().is_cuda())
    EXPECT_ERROR_HAS(train::DPOTrainer(test::lora_llama(kFloat32, 0.0), pairs, graph).train(), "cuda_graph 'on'",
                     "as long as their longest pair");
  EXPECT_ERROR_HAS(train::DPOTrainer(test::lora_llama(kFloat32, 0.0), pairs, args_in(dir, 2)).evaluate(),
                   "evaluate: no eval pairs");
}

TEST(PairwiseTrainers, CpoSimpoAndOrpoLearnThePreference) {
  const auto pairs = synthetic_pairs();
  auto model = [] { return test::lora_llama(kFloat32, 0.0, {"q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"}); };
  {
    TempDir dir;
    train::CPOTrainer t(model(), pairs, args_in(dir, 40), {}, pairs);
    t.train();
    EXPECT_EQ(t.evaluate().at("eval_rewards/accuracies"), 1.0);
    EXPECT_TRUE(std::isfinite(last(t.state(), "nll_loss")));
  }
  {
    TempDir dir;
    train::CPOTrainer t(model(), pairs, args_in(dir, 40), {.beta = 2.0, .loss_type = "simpo", .cpo_alpha = 0}, pairs);
    t.train();
    EXPECT_EQ(t.evaluate().at("eval_rewards/accuracies"), 1.0);
  }
  {
    TempDir dir;
    train::ORPOTrainer t(model(), pairs, args_in(dir, 40), {.beta = 1.0}, pairs);
    t.train();
    const LogEntry e = t.evaluate();
    EXPECT_EQ(e.at("eval_rewards/accuracies"), 1.0);
    EXPECT_GT(e.at("eval_log_odds_chosen"), 0.0);
  }
}

TEST(KTOTrainer, LearnsDesirableFromUndesirable) {
  TempDir dir;
  const auto examples = synthetic_unpaired();
  auto model = test::lora_llama(kFloat32, 0.0, {"q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"});
  train::KTOTrainer t(model, examples, args_in(dir, 40), {}, examples);
  const LogEntry before = t.evaluate();
  t.train();
  const LogEntry after = t.evaluate();
  EXPECT_GT(after.at("eval_rewards/margins"), before.at("eval_rewards/margins") + 0.3);
  EXPECT_LT(after.at("eval_loss"), before.at("eval_loss"));
  EXPECT_GE(last(t.state(), "kl"), 0.0);
  TrainingArguments one = args_in(dir, 2);
  one.per_device_train_batch_size = 1;
  EXPECT_ERROR_HAS(train::KTOTrainer(test::lora_llama(kFloat32, 0.0), examples, one), "KTOTrainer",
                   "per_device_train_batch_size must be > 1");
  Generator gen(1);
  auto full = std::make_shared<nn::LlamaForCausalLM>(test::preference_config(), gen);
  EXPECT_ERROR_HAS(train::KTOTrainer(full, examples, args_in(dir, 2), {.precompute_ref_log_probs = true}),
                   "the KL rows pair each batch's completions anew");
}

}  // namespace
}  // namespace tg
