// train::Trainer on a tiny Llama with LoRA on the CPU: the loss falls, a resumed run is bitwise the
// uninterrupted one, save_total_limit, extending a finished run, the data fingerprint, argument
// validation, the callbacks' order, evaluate() against a hand-computed mean, the schedules, and
// packed rows (Layout::PackSeparate) trained with their position ids, on one rank or several.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/limits.h"
#include "distributed/fake_communicator.h"
#include "io/safetensors.h"
#include "nn/models/llama.h"
#include "nn/models/quantization.h"
#include "optim/lr_scheduler.h"
#include "peft/lora.h"
#include "tests/test_support.h"
#include "train/checkpoint.h"
#include "train/train_log.h"
#include "train/trainer.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using train::LogEntry;
using train::Trainer;
using train::TrainerState;
using train::TrainingArguments;

constexpr int64_t kVocab = 32, kSeq = 8;

nn::LlamaConfig tiny_config() {
  nn::LlamaConfig c;
  c.vocab_size = kVocab;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.max_position_embeddings = 16;
  c.initializer_range = 0.3;  // logits far from uniform, as a trained base has: a frozen head the adapters can use
  return c;
}

// A random frozen base with LoRA on q/k/v/o (r 4); the same weights for the same seed.
std::shared_ptr<nn::LlamaForCausalLM> lora_model(double dropout = 0.0, uint64_t seed = 7) {
  Generator gen(seed);
  auto model = std::make_shared<nn::LlamaForCausalLM>(tiny_config(), gen);
  peft::apply_lora(*model,
                   {.r = 4, .lora_alpha = 8, .lora_dropout = dropout,
                    .target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
                   gen);
  return model;
}

// Examples whose next token follows from the current one (t -> 3t + 1 mod V): learnable.
std::shared_ptr<data::SequenceDataset> pattern_rows(int examples = 40, int32_t changed_token = -1,
                                                    data::Layout layout = data::Layout::Pack) {
  std::vector<std::vector<int32_t>> ids;
  for (int e = 0; e < examples; ++e) {
    std::vector<int32_t> x{static_cast<int32_t>(e % kVocab)};
    for (int t = 1; t < 12; ++t) x.push_back((x.back() * 3 + 1) % kVocab);
    ids.push_back(x);
  }
  if (changed_token >= 0) ids[examples - 1][5] = changed_token;
  return std::make_shared<data::SequenceDataset>(data::corpus_from_examples(ids), kSeq, layout);
}

// Short examples of 2 to 5 tokens of the pattern, packed whole into rows (Layout::PackSeparate).
std::shared_ptr<data::SequenceDataset> packed_rows(int examples = 40) {
  std::vector<std::vector<int32_t>> ids;
  for (int e = 0; e < examples; ++e) {
    std::vector<int32_t> x{static_cast<int32_t>((e * 7) % kVocab)};
    for (int t = 1; t < 2 + e % 4; ++t) x.push_back((x.back() * 3 + 1) % kVocab);
    ids.push_back(x);
  }
  return std::make_shared<data::SequenceDataset>(data::corpus_from_examples(ids), kSeq, data::Layout::PackSeparate);
}

TrainingArguments args_in(const TempDir& dir, int64_t max_steps) {
  return {.output_dir = dir / "out", .learning_rate = 1e-2, .max_steps = max_steps, .per_device_train_batch_size = 4,
          .logging_steps = 1, .save_steps = 0, .seed = 3, .use_cpu = true, .disable_tqdm = true};
}

std::vector<double> train_losses(const TrainerState& s) {
  std::vector<double> out;
  for (const LogEntry& e : s.log_history)
    if (e.has("loss")) out.push_back(e.at("loss"));
  return out;
}

std::vector<float> trainable_values(nn::Module& m) {
  std::vector<float> out;
  for (const Tensor& p : m.trainable_parameters())
    for (float v : p.to_vector<float>()) out.push_back(v);
  return out;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Stops the run after a given step (a Ctrl-C flag would, in a program).
struct StopAt : train::TrainerCallback {
  explicit StopAt(int64_t step) : step(step) {}
  void on_step_end(const TrainerState& s, train::TrainerControl& c) override { c.should_training_stop = s.global_step == step; }
  int64_t step;
};

TEST(Trainer, TinyLlamaLoraLossFalls) {
  TempDir dir;
  auto model = lora_model();
  Trainer trainer(model, pattern_rows(), args_in(dir, 40));
  const train::TrainOutput out = trainer.train();
  EXPECT_EQ(out.global_step, 40);
  const std::vector<double> losses = train_losses(trainer.state());
  ASSERT_EQ(losses.size(), 40u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += losses[i] / 5, last += losses[35 + i] / 5;
  EXPECT_LT(last, first - 0.5) << "loss went from " << first << " to " << last;
  // The logs: a CSV row and a JSON line each step, with grad_norm and tokens/s.
  const std::string csv = read(dir / "out/log.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), train::TrainLog::csv_header());
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 41);
  const std::string jsonl = read(dir / "out/log.jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 40);
  const json::Value row = json::parse(jsonl.substr(0, jsonl.find('\n')));
  for (const char* key : {"loss", "learning_rate", "grad_norm", "tokens_per_second", "epoch"})
    EXPECT_TRUE(row.find(key)) << key;
  EXPECT_TRUE(fs::exists(dir / "out/checkpoint-40/training_state.safetensors"));  // the end's
  EXPECT_TRUE(fs::exists(dir / "out/checkpoint-40/adapter_model.safetensors"));
}

// The printed row is short (the files keep every digit), the epoch last.
TEST(Trainer, ALogRowPrintsOnOneShortLine) {
  EXPECT_EQ(train::TrainLog::console_line({10, {{"loss", 2.3141592653}, {"epoch", 0.5}, {"learning_rate", 2e-4},
                                                {"grad_norm", 0.123456789}}}),
            "step 10 | grad_norm 0.12346 | learning_rate 0.0002 | loss 2.3142 | epoch 0.5");
}

// With LoRA dropout (the default generator) and gradient accumulation (the data position).
TEST(Trainer, ResumedRunIsBitwiseTheUninterruptedOne) {
  TempDir dir;
  const std::string a = dir / "a", b = dir / "b";
  TrainingArguments args = args_in(dir, 20);
  args.output_dir = a + "/out";
  args.gradient_accumulation_steps = 2;
  args.lr_scheduler_type = "cosine";
  args.warmup_steps = 3;
  args.save_steps = 5;
  auto whole = lora_model(0.1);
  Trainer uninterrupted(whole, pattern_rows(), args);
  uninterrupted.train();

  args.output_dir = b + "/out";
  auto first_model = lora_model(0.1);
  Trainer first(first_model, pattern_rows(), args);
  first.add_callback(std::make_shared<StopAt>(12));
  EXPECT_EQ(first.train().global_step, 12);
  ASSERT_TRUE(fs::exists(b + "/out/checkpoint-12/training_state.safetensors"));  // written when stopped

  args.resume_from_checkpoint = "latest";
  auto resumed_model = lora_model(0.1);
  Trainer resumed(resumed_model, pattern_rows(), args);
  EXPECT_EQ(resumed.train().global_step, 20);
  EXPECT_EQ(trainable_values(*resumed_model), trainable_values(*whole));
  const std::vector<double> all = train_losses(uninterrupted.state()), again = train_losses(resumed.state());
  ASSERT_EQ(again.size(), all.size());  // the checkpoint's history, then the resumed steps
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(again[i], all[i]) << "step " << i + 1;
  // The log files hold each step once, as the uninterrupted run's do.
  const std::string ja = read(a + "/out/log.jsonl"), jb = read(b + "/out/log.jsonl");
  EXPECT_EQ(std::count(ja.begin(), ja.end(), '\n'), 20);
  EXPECT_EQ(std::count(jb.begin(), jb.end(), '\n'), 20);
  EXPECT_EQ(read(b + "/out/loss.svg"), read(a + "/out/loss.svg")) << "the resumed run's curve is not the whole run's";
}

TEST(Trainer, SaveTotalLimitKeepsTheNewestCheckpoints) {
  TempDir dir;
  TrainingArguments args = args_in(dir, 10);
  args.save_steps = 2;
  args.save_total_limit = 2;
  Trainer trainer(lora_model(), pattern_rows(), args);
  std::vector<std::string> saved;
  struct OnSave : train::TrainerCallback {
    std::vector<std::string>* saved;
    void on_save(const TrainerState&, const std::string& d) override { saved->push_back(fs::path(d).filename()); }
  };
  auto cb = std::make_shared<OnSave>();
  cb->saved = &saved;
  trainer.add_callback(cb);
  trainer.train();
  EXPECT_EQ(saved, (std::vector<std::string>{"checkpoint-2", "checkpoint-4", "checkpoint-6", "checkpoint-8",
                                             "checkpoint-10"}));
  const auto left = train::complete_checkpoints(dir / "out");
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].first, 8);
  EXPECT_EQ(left[1].first, 10);
  EXPECT_FALSE(fs::exists(dir / "out/checkpoint-6"));
}

TEST(Trainer, AFinishedRunIsExtendedWhenMaxStepsGrows) {
  TempDir dir;
  TrainingArguments args = args_in(dir, 10);
  args.warmup_steps = 2;
  Trainer(lora_model(), pattern_rows(), args).train();

  args.resume_from_checkpoint = "latest";
  {  // the same max_steps: nothing left to train
    auto model = lora_model();
    Trainer same(model, pattern_rows(), args);
    EXPECT_EQ(same.train().global_step, 10);
  }
  args.max_steps = 5;
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(), args).train(), "max_steps 5 is below the step 10",
                   "checkpoint-10");
  args.max_steps = 16;
  Trainer longer(lora_model(), pattern_rows(), args);
  EXPECT_EQ(longer.train().global_step, 16);
  EXPECT_TRUE(fs::exists(dir / "out/checkpoint-16/training_state.safetensors"));
  // The schedule re-planned over 16 steps: step 11 runs at the factor of step 10 of 16.
  const LogEntry& step11 = longer.state().log_history.at(10);
  ASSERT_EQ(step11.step, 11);
  EXPECT_DOUBLE_EQ(step11.at("learning_rate"), 1e-2 * optim::lr_factor("linear", 10, 2, 16));
}

TEST(Trainer, ResumingOnOtherDataNamesWhatChanged) {
  TempDir dir;
  TrainingArguments args = args_in(dir, 4);
  Trainer(lora_model(), pattern_rows(), args).train();
  args.resume_from_checkpoint = dir / "out/checkpoint-4";
  args.max_steps = 8;
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(40, 0), args).train(), "train_dataset is not the one",
                   "the same 60 rows of 8 tokens", "rows [", "differ");
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(30), args).train(), "60 rows of 8 tokens then, 45 rows");
  // A changed argument that decides the numbers is named, with both values.
  args.learning_rate = 2e-2;
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(), args).train(), "learning_rate: 0.01 then, 0.02 now");
  args.learning_rate = 1e-2;
  args.per_device_train_batch_size = 2;
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(), args).train(), "batches of 4 rows", "now 2 x 1 = 2");
  args.per_device_train_batch_size = 4;
  args.resume_from_checkpoint = dir / "nowhere";
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(), args).train(), "resume_from_checkpoint", "nowhere",
                   "training_state.safetensors");
  args.resume_from_checkpoint = "latest";
  args.output_dir = dir / "empty";
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(), args).train(), "'latest'", "no complete checkpoint", "empty");
}

TEST(Trainer, EveryArgumentIsValidatedByName) {
  auto bad = [](auto edit, std::vector<const char*> parts) {
    TrainingArguments a;
    edit(a);
    const std::string msg = test::error_of([&] { a.validate(); });
    EXPECT_FALSE(msg.empty()) << parts[0];
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nmissing: " << p;
  };
  bad([](auto& a) { a.learning_rate = NAN; }, {"learning_rate", "finite", "nan"});
  bad([](auto& a) { a.learning_rate = -1; }, {"learning_rate", "> 0"});
  bad([](auto& a) { a.weight_decay = INFINITY; }, {"weight_decay", "finite"});
  bad([](auto& a) { a.adam_beta2 = 1.0; }, {"adam_beta2", "[0, 1)"});
  bad([](auto& a) { a.adam_epsilon = 0; }, {"adam_epsilon"});
  bad([](auto& a) { a.lr_scheduler_type = "cosine_with_restarts"; }, {"lr_scheduler_type", "cosine_with_restarts",
                                                                       "constant_with_warmup"});
  bad([](auto& a) { a.warmup_steps = -1; }, {"warmup_steps", "at least 0", "-1"});
  bad([](auto& a) { a.max_steps = 30, a.warmup_steps = 30; }, {"warmup_steps 30 >= max_steps 30", "peak"});
  bad([](auto& a) { a.lr_scheduler_type = "constant", a.warmup_steps = 5; }, {"constant_with_warmup"});
  bad([](auto& a) { a.max_steps = 0; }, {"max_steps", "-1"});
  bad([](auto& a) { a.num_train_epochs = INFINITY; }, {"num_train_epochs", "finite"});
  bad([](auto& a) { a.num_train_epochs = 0; }, {"num_train_epochs", "> 0"});
  bad([](auto& a) { a.per_device_train_batch_size = 0; }, {"per_device_train_batch_size", "at least 1"});
  bad([](auto& a) { a.per_device_eval_batch_size = -2; }, {"per_device_eval_batch_size"});
  bad([](auto& a) { a.gradient_accumulation_steps = 0; }, {"gradient_accumulation_steps"});
  bad([](auto& a) { a.max_grad_norm = NAN; }, {"max_grad_norm", "finite"});
  bad([](auto& a) { a.max_grad_norm = -1; }, {"max_grad_norm", ">= 0"});
  bad([](auto& a) { a.logging_steps = 0; }, {"logging_steps"});
  bad([](auto& a) { a.eval_steps = -1; }, {"eval_steps"});
  bad([](auto& a) { a.save_steps = -1; }, {"save_steps"});
  bad([](auto& a) { a.save_total_limit = -1; }, {"save_total_limit"});
  bad([](auto& a) { a.seed = -1; }, {"seed"});
  bad([](auto& a) { a.output_dir = ""; }, {"output_dir"});
  bad([](auto& a) { a.cuda_graph = "yes"; }, {"cuda_graph", "'yes'"});
  // Issue 47: the sizes every step allocates by, and the steps, bounded before anything is allocated.
  bad([](auto& a) { a.per_device_train_batch_size = kMaxBatch + 1; },
      {"per_device_train_batch_size 1048577 is above the limit 1048576"});
  bad([](auto& a) { a.per_device_eval_batch_size = int64_t{1} << 40; }, {"per_device_eval_batch_size 1099511627776"});
  bad([](auto& a) { a.gradient_accumulation_steps = int64_t{1} << 40; },
      {"gradient_accumulation_steps 1099511627776 is above the limit 1048576"});
  bad([](auto& a) { a.max_steps = INT64_MAX; }, {"max_steps 9223372036854775807 is above the limit 1099511627776"});
  bad([](auto& a) { a.num_train_epochs = 1e300; }, {"num_train_epochs 1e+300 is above the limit 1099511627776"});
  TrainingArguments{}.validate();  // the defaults are valid

  TempDir dir;
  // The Trainer validates too, and checks what depends on the model and the data.
  TrainingArguments args = args_in(dir, 10);
  args.learning_rate = NAN;
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(), args), "TrainingArguments", "learning_rate");
  args = args_in(dir, -1);
  args.num_train_epochs = 1;  // 60 rows / 4: 15 steps
  args.warmup_steps = 15;
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(), args).train(),
                   "warmup_steps 15 >= the max_steps of num_train_epochs 15");
  args.warmup_steps = 0;
  args.num_train_epochs = static_cast<double>(kMaxSteps);  // within its bound, but 15 steps an epoch
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(), args).train(), "num_train_epochs 1.09951e+12 of 15 steps",
                   "above the limit 1099511627776");
  args.num_train_epochs = 1;
  args.warmup_steps = 15;
  args.bf16 = true;
  auto everything_trains = std::make_shared<nn::LlamaForCausalLM>(tiny_config());
  EXPECT_ERROR_HAS(Trainer(everything_trains, pattern_rows(), args), "bf16", "every parameter trains", "full fine-tuning");
  args.bf16 = false;
  args.cuda_graph = "on";
  args.warmup_steps = 0;
  EXPECT_ERROR_HAS(Trainer(lora_model(), pattern_rows(), args).train(), "cuda_graph 'on'", "CPU");
  args.cuda_graph = "auto";
  auto frozen = std::make_shared<nn::LlamaForCausalLM>(tiny_config());
  frozen->requires_grad_(false);
  EXPECT_ERROR_HAS(Trainer(frozen, pattern_rows(), args), "no trainable parameter");
  auto long_rows = std::make_shared<data::SequenceDataset>(data::corpus_from_examples({std::vector<int32_t>(64, 1)}),
                                                           32, data::Layout::Pack);
  EXPECT_ERROR_HAS(Trainer(lora_model(), long_rows, args), "32 tokens", "context is 16", "max_position_embeddings");
}

// Issue 47: a checkpoint's metadata is parsed checked, each bad field named with its file before
// anything loads (before, std::stoll read "2abc" as 2 and threw "stoll" past int64), and a folder
// named checkpoint-<more than int64> is no checkpoint of a run.
TEST(Trainer, ACorruptCheckpointIsNamedBeforeAnythingLoads) {
  TempDir dir;
  TrainingArguments args = args_in(dir, 4);
  Trainer(lora_model(), pattern_rows(), args).train();
  const std::string state = dir / "out/checkpoint-4/training_state.safetensors";
  const safetensors::Loaded good = safetensors::load_file_with_metadata(state);
  args.resume_from_checkpoint = "latest";
  args.max_steps = 8;
  auto resumed_with = [&](const std::string& key, const std::string& value) {
    safetensors::Metadata meta = good.metadata;
    meta["extra/" + key] = value;
    safetensors::save_file(good.tensors, state, meta);
    return test::error_of([&] { Trainer(lora_model(), pattern_rows(), args).train(); });
  };
  for (const char* key : {"train_batch_size", "global_step", "batches_drawn"})
    for (const char* value : {"2abc", "99999999999999999999", "-4", ""}) {
      const std::string msg = resumed_with(key, value), want = "'" + state + "' metadata " + key + "='" + value + "'";
      EXPECT_NE(msg.find(want + " is not an integer in ["), std::string::npos) << msg;
    }
  EXPECT_NE(resumed_with("data_fingerprint", R"({"rows": 60, "seq": 8, "segments": ["zz"]})")
                .find("data_fingerprint segment='zz' is not a hexadecimal integer"),
            std::string::npos);
  EXPECT_NE(resumed_with("training_args", "{").find("metadata training_args is not JSON"), std::string::npos);
  safetensors::save_file(good.tensors, state, good.metadata);
  fs::create_directories(dir / "out/checkpoint-99999999999999999999");
  fs::copy_file(state, dir / "out/checkpoint-99999999999999999999/training_state.safetensors");
  const auto found = train::complete_checkpoints(dir / "out");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].first, 4);
}

TEST(Trainer, CallbacksAreCalledInTransformersOrder) {
  TempDir dir;
  TrainingArguments args = args_in(dir, 4);
  args.logging_steps = 2;
  args.eval_steps = 2;
  args.save_steps = 4;
  struct Recorder : train::TrainerCallback {
    std::vector<std::string> events;
    void add(const std::string& what, const TrainerState& s) { events.push_back(what + " " + std::to_string(s.global_step)); }
    void on_train_begin(const TrainerState& s) override { add("begin", s); }
    void on_step_end(const TrainerState& s, train::TrainerControl&) override { add("step", s); }
    void on_log(const TrainerState& s, const LogEntry& e) override { add(e.has("eval_loss") ? "log-eval" : "log", s); }
    void on_evaluate(const TrainerState& s, const LogEntry&) override { add("evaluate", s); }
    void on_save(const TrainerState& s, const std::string&) override { add("save", s); }
    void on_train_end(const TrainerState& s) override { add("end", s); }
  };
  auto rec = std::make_shared<Recorder>();
  auto rows = pattern_rows();
  Trainer trainer(lora_model(), rows, args, rows);
  trainer.add_callback(rec);
  trainer.train();
  EXPECT_EQ(rec->events, (std::vector<std::string>{"begin 0", "step 1", "step 2", "log 2", "log-eval 2", "evaluate 2",
                                                   "step 3", "step 4", "log 4", "log-eval 4", "evaluate 4", "save 4",
                                                   "end 4"}));
}

// The mean next-token cross entropy over every eval row, from the logits in float64.
TEST(Trainer, EvaluateIsTheTokenWeightedMeanLoss) {
  TempDir dir;
  auto model = lora_model();
  auto rows = pattern_rows(13);
  TrainingArguments args = args_in(dir, 3);
  args.per_device_eval_batch_size = 3;  // 19 rows: a last batch of one
  Trainer trainer(model, pattern_rows(), args, rows);
  trainer.train();
  const LogEntry m = trainer.evaluate();
  EXPECT_TRUE(model->is_training());
  double total = 0;
  int64_t count = 0;
  {
    NoGradGuard no_grad;
    model->eval();
    for (int64_t r = 0; r < rows->rows(); ++r) {
      const data::Batch b = rows->rows_batch(r, 1, Device::cpu());
      const std::vector<float> logits = model->forward(b.ids).to_vector<float>();
      const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
      for (int64_t t = 0; t + 1 < kSeq; ++t) {
        if (labels[t + 1] == data::kIgnoreIndex) continue;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < kVocab; ++v) mx = std::max<double>(mx, logits[t * kVocab + v]);
        for (int64_t v = 0; v < kVocab; ++v) sum += std::exp(logits[t * kVocab + v] - mx);
        total += std::log(sum) + mx - logits[t * kVocab + labels[t + 1]];
        ++count;
      }
    }
    model->train();
  }
  EXPECT_EQ(m.at("eval_tokens"), static_cast<double>(count));
  EXPECT_NEAR(m.at("eval_loss"), total / static_cast<double>(count), 1e-5);
  EXPECT_DOUBLE_EQ(m.at("eval_perplexity"), std::exp(m.at("eval_loss")));
  EXPECT_EQ(m.step, 3);
  Trainer no_eval(lora_model(), pattern_rows(), args);
  EXPECT_ERROR_HAS(no_eval.evaluate(), "evaluate", "no eval_dataset");
}

// bf16 by the flag is peft's layout made by hand (the base cast before apply_lora): the same
// adapters, the same dtypes, the same losses bit for bit.
TEST(Trainer, Bf16CastsTheFrozenBaseAndKeepsTheAdaptersFloat32) {
  TempDir dir;
  TrainingArguments args = args_in(dir, 4);
  args.bf16 = true;
  auto by_flag = lora_model();
  const std::vector<float> adapters = trainable_values(*by_flag);
  args.output_dir = dir / "flag";
  Trainer flag(by_flag, pattern_rows(), args);
  EXPECT_EQ(trainable_values(*by_flag), adapters) << "the float32 adapters were rounded";
  for (const auto& [name, p] : by_flag->named_parameters())
    EXPECT_EQ(p.dtype(), p.requires_grad() ? kFloat32 : kBFloat16) << name;
  for (const auto& [name, b] : by_flag->named_buffers())
    if (is_floating_point(b.dtype())) EXPECT_EQ(b.dtype(), kBFloat16) << name;
  flag.train();

  Generator gen(7);
  auto by_hand = std::make_shared<nn::LlamaForCausalLM>(tiny_config(), gen);
  by_hand->to(kBFloat16);
  peft::apply_lora(*by_hand,
                   {.r = 4, .lora_alpha = 8, .target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                "up_proj", "down_proj"}},
                   gen);
  args.output_dir = dir / "hand";
  Trainer hand(by_hand, pattern_rows(), args);
  hand.train();
  const std::vector<double> losses = train_losses(flag.state());
  EXPECT_EQ(losses, train_losses(hand.state()));
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_EQ(trainable_values(*by_flag), trainable_values(*by_hand));
}

// QLoRA under bf16: the 4-bit layers' quantisation state stays float32 (bitsandbytes' layout; a
// cast would break their dequantisation), everything else frozen is bfloat16, and it trains.
TEST(Trainer, Bf16KeepsTheQuantisationStateOfA4BitBaseFloat32) {
  TempDir dir;
  Generator gen(7);
  auto model = std::make_shared<nn::LlamaForCausalLM>(tiny_config(), gen);
  model->to(kBFloat16);
  nn::replace_with_4bit_linear(*model, {.load_in_4bit = true});
  peft::apply_lora(*model, {.r = 4, .lora_alpha = 8}, gen);
  std::map<std::string, DType> before;
  for (const auto& [name, b] : model->named_buffers()) before[name] = b.dtype();
  TrainingArguments args = args_in(dir, 3);
  args.bf16 = true;
  Trainer trainer(model, pattern_rows(), args);
  size_t quant_state = 0;
  for (const auto& [name, b] : model->named_buffers()) {
    const bool kept = name.find("absmax") != std::string::npos || name.find("quant_map") != std::string::npos ||
                      name.find("workspace") != std::string::npos;
    quant_state += kept;
    EXPECT_EQ(b.dtype(), kept ? before[name] : kBFloat16) << name;
  }
  EXPECT_GT(quant_state, 0u);
  trainer.train();
  const std::vector<double> losses = train_losses(trainer.state());
  ASSERT_EQ(losses.size(), 3u);
  for (double loss : losses) EXPECT_TRUE(std::isfinite(loss));
}

// evaluate() after train() (and on another dataset, with its own prefix) is logged like the
// in-run evaluations: the CSV, the JSON lines and the loss curve's markers.
TEST(Trainer, EvaluateAfterTrainIsLoggedAndDrawn) {
  TempDir dir;
  auto rows = pattern_rows();
  TrainingArguments args = args_in(dir, 4);
  args.eval_steps = 2;
  Trainer trainer(lora_model(), rows, args, rows);
  trainer.train();
  const LogEntry end = trainer.evaluate();
  const LogEntry other = trainer.evaluate(pattern_rows(8), "eval_small");
  EXPECT_TRUE(other.has("eval_small_loss") && other.has("eval_small_perplexity") && other.has("eval_small_tokens"));
  EXPECT_FALSE(other.has("eval_loss"));
  const std::string jsonl = read(dir / "out/log.jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 4 + 2 + 2);  // steps, in-run evaluations, these two
  EXPECT_NE(jsonl.find(end.json()), std::string::npos);
  const std::string csv = read(dir / "out/log.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 4 + 2 + 2);
  const std::string svg = read(dir / "out/loss.svg");
  size_t markers = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++markers;
  EXPECT_EQ(markers, 3u);  // eval_loss at steps 2, 4 and after train()
  EXPECT_NE(svg.find("optimizer step"), std::string::npos);
}

TEST(Trainer, PackedRowsTrainWithTheirPositionIds) {
  // A step's loss on PackSeparate rows is the model's loss given the rows' position ids (each
  // example alone: tests/test_packing.cpp), not the loss of the rows read as one sequence.
  TempDir dir;
  auto rows = packed_rows();
  TrainingArguments args = args_in(dir, 1);
  const data::Batch first = rows->batch(0, args.per_device_train_batch_size, static_cast<uint64_t>(args.seed), Device::cpu());
  double separate = 0, crossed = 0;
  {
    NoGradGuard no_grad;
    auto before = lora_model();
    separate = before->loss(first.ids, first.labels, first.position_ids).item<double>();
    crossed = before->loss(first.ids, first.labels).item<double>();
  }
  Trainer trainer(lora_model(), rows, args, rows);
  trainer.train();
  ASSERT_EQ(train_losses(trainer.state()).size(), 1u);
  EXPECT_NEAR(train_losses(trainer.state())[0], separate, 1e-6);
  EXPECT_GT(std::abs(separate - crossed), 1e-4);
  EXPECT_TRUE(std::isfinite(trainer.evaluate().at("eval_loss")));
}

TEST(Trainer, SaveModelWritesThePeftAdapter) {
  TempDir dir;
  auto model = lora_model();
  Trainer trainer(model, pattern_rows(), args_in(dir, 5));
  trainer.train();
  trainer.save_model(dir / "adapter");
  Generator gen(7);
  auto base = std::make_shared<nn::LlamaForCausalLM>(tiny_config(), gen);
  const peft::LoraConfig loaded = peft::load_adapter(*base, dir / "adapter");
  EXPECT_EQ(loaded.r, 4);
  EXPECT_EQ(loaded.lora_alpha, 8);
  NoGradGuard no_grad;
  model->eval(), base->eval();
  const Tensor ids = from_vector(std::vector<int64_t>{1, 4, 13, 8}, {1, 4});
  EXPECT_EQ(model->forward(ids).to_vector<float>(), base->forward(ids).to_vector<float>());
}

TEST(Trainer, SchedulesAreTransformers) {
  // get_linear_schedule_with_warmup(warmup 2, total 10), get_cosine_..., constant_with_warmup.
  EXPECT_DOUBLE_EQ(optim::lr_factor("linear", 0, 2, 10), 0.0);
  EXPECT_DOUBLE_EQ(optim::lr_factor("linear", 1, 2, 10), 0.5);
  EXPECT_DOUBLE_EQ(optim::lr_factor("linear", 2, 2, 10), 1.0);
  EXPECT_DOUBLE_EQ(optim::lr_factor("linear", 6, 2, 10), 0.5);
  EXPECT_DOUBLE_EQ(optim::lr_factor("linear", 12, 2, 10), 0.0);
  EXPECT_NEAR(optim::lr_factor("cosine", 6, 2, 10), 0.5, 1e-15);
  EXPECT_NEAR(optim::lr_factor("cosine", 4, 2, 10), 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_DOUBLE_EQ(optim::lr_factor("constant_with_warmup", 1, 4, 10), 0.25);
  EXPECT_DOUBLE_EQ(optim::lr_factor("constant_with_warmup", 9, 4, 10), 1.0);
  EXPECT_DOUBLE_EQ(optim::lr_factor("constant", 0, 0, 10), 1.0);
}
// Two ranks (threads of a FakeGroup) of 2 rows each train as one process of 4 rows: the same
// global batches, the gradients averaged (to float rounding: the sums run in another order).
TEST(Trainer, DataParallelRanksTrainAsOneProcess) {
  for (bool packed : {false, true}) {  // PackSeparate: each rank takes its rows' position ids
    SCOPED_TRACE(packed ? "PackSeparate" : "Pack");
    auto rows = [packed] { return packed ? packed_rows() : pattern_rows(); };
    TempDir dir;
    TrainingArguments args = args_in(dir, 6);
    args.output_dir = dir / "one";
    auto single = lora_model();
    Trainer one(single, rows(), args);
    one.train();

    args.output_dir = dir / "ranks";
    args.per_device_train_batch_size = 2;
    std::vector<std::shared_ptr<nn::LlamaForCausalLM>> models = {lora_model(), lora_model()};
    std::vector<std::vector<double>> losses(2);
    distributed::FakeGroup::run(2, [&](distributed::Communicator& comm) {
      Trainer rank(models[comm.rank()], rows(), args);
      rank.use_communicator(comm);
      rank.train();
      losses[comm.rank()] = train_losses(rank.state());
    });
    const std::vector<double> want = train_losses(one.state());
    ASSERT_EQ(losses[0].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(losses[0][i], want[i], 1e-5) << "step " << i + 1;
      EXPECT_EQ(losses[1][i], losses[0][i]);  // every rank logs the global loss
    }
    const std::vector<float> a = trainable_values(*single), b = trainable_values(*models[0]);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
    EXPECT_EQ(trainable_values(*models[1]), b);
    EXPECT_TRUE(fs::exists(dir / "ranks/checkpoint-6/training_state.safetensors"));  // rank 0 wrote it
  }
}

// On the GPU the captured step's replays are the eager steps bit for bit (the lead's GPU run).
TEST(Trainer, CudaGraphRunEqualsTheEagerOneOnTheGpu) {
  if (!cuda_is_available()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  for (bool packed : {false, true}) {  // PackSeparate rows: the graph replays their position ids too
    SCOPED_TRACE(packed ? "PackSeparate" : "Pack");
    std::vector<std::vector<float>> weights;
    for (const char* graph : {"off", "on"}) {
      TrainingArguments args = args_in(dir, 8);
      args.use_cpu = false;
      args.cuda_graph = graph;
      args.output_dir = dir / (std::string(graph) + (packed ? "-packed" : ""));
      auto model = lora_model();
      Trainer trainer(model, packed ? packed_rows() : pattern_rows(), args);
      trainer.train();
      EXPECT_EQ(trainer.uses_cuda_graph(), std::string(graph) == "on");
      weights.push_back(trainable_values(*model));
    }
    EXPECT_EQ(weights[0], weights[1]);
  }
}

}  // namespace
}  // namespace tg
