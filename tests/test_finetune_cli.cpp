// What a new user of examples/lora_finetune and examples/generate hit on real Hugging Face folders
// (issue 47), each point run through the built programs on the tiny fixtures: the folder's dtype,
// a protected --out, rows cut at --seq, LoRA targets, transformers' flag names and epochs, system
// messages a template refuses, a memory estimate, an adapter's base, the end-of-run commands, chat
// data with tools and ShareGPT's layout, and --show-labels.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <regex>

#include "data/tokenizer.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/models/llama.h"
#include "nn/models/pretrained.h"
#include "peft/lora.h"
#include "tests/example_runs.h"
#include "tests/test_support.h"
#include "train/output_dir.h"
#include "train/training_arguments.h"

using namespace tg::test;

namespace {

const fs::path kTinyLlama = fixtures() / "tiny_llama";

// tiny_llama's files in dir/name, its config.json edited by `edit`.
std::string copy_of_tiny_llama(const TempDir& dir, const std::string& name,
                               const std::function<void(tg::json::Value&)>& edit = nullptr) {
  const fs::path out = dir / name;
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(kTinyLlama)) fs::copy_file(e.path(), out / e.path().filename());
  if (edit) {
    tg::json::Value config = tg::json::parse(read(out / "config.json"));
    edit(config);
    write(out / "config.json", tg::json::dump(config, 2));
  }
  return out.string();
}

// tiny_llama with a chat template that marks the assistant turns ({% generation %}).
std::string chat_base(const TempDir& dir) {
  const std::string base = copy_of_tiny_llama(dir, "chat_base");
  write(base + "/tokenizer_config.json",
        R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",)"
        R"( "chat_template": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }})"
        R"({{ eos_token }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}"})");
  return base;
}

// Conversations a line: a user turn of `user_words` words, a short reply.
std::string write_chat(const TempDir& dir, int user_words, int rows = 40) {
  std::string text;
  for (int i = 0; i < rows; ++i) {
    std::string question;
    for (int w = 0; w < user_words; ++w) question += "word ";
    text += R"({"messages": [{"role": "user", "content": ")" + question + "what does bob like?" +
            R"("}, {"role": "assistant", "content": "bob likes tea."}]})" + "\n";
  }
  write(dir / "chat.jsonl", text);
  return dir / "chat.jsonl";
}

// A safetensors file of one F32 tensor whose bytes are a sparse hole: only its header is ever read.
void write_header_only_safetensors(const std::string& path, const std::string& name, const std::string& shape,
                                   uint64_t bytes) {
  std::string header = "{\"" + name + "\": {\"dtype\": \"F32\", \"shape\": " + shape +
                       ", \"data_offsets\": [0, " + std::to_string(bytes) + "]}}";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  write(path, file + header);
  fs::resize_file(path, 8 + header.size() + bytes);
}

bool has(const std::string& log, const std::string& part) { return log.find(part) != std::string::npos; }
bool model_loaded(const std::string& log) { return has(log, "base: "); }

const std::string kQuick = " --steps 2 --warmup 1 --batch 2 --seq 32 --eval-every 0 --sample-tokens 0 --threads 1 ";

}  // namespace

// 1. The folder's own dtype by default, in the API and the programs; --merge keeps it.
TEST(FinetuneCli, DtypeAutoIsTheFoldersOwnAndAMergedRunKeepsIt) {
  TempDir dir;
  const std::string bf16 = dir / "bf16";
  tg::nn::save_pretrained(*tg::nn::from_pretrained(kTinyLlama.string(), {.dtype = tg::kBFloat16}), bf16);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(kTinyLlama / f, fs::path(bf16) / f);
  EXPECT_EQ(tg::nn::pretrained_dtype(bf16), tg::kBFloat16);
  EXPECT_EQ(tg::nn::from_pretrained(bf16)->lm_head->weight.dtype(), tg::kBFloat16);
  EXPECT_EQ(tg::nn::from_pretrained(bf16, {.dtype = tg::kFloat32})->lm_head->weight.dtype(), tg::kFloat32);
  EXPECT_EQ(tg::nn::from_pretrained(kTinyLlama.string())->lm_head->weight.dtype(), tg::kFloat32);
  // Older transformers write torch_dtype; float16 is widened; anything else is named.
  const std::string older = copy_of_tiny_llama(dir, "older", [](tg::json::Value& c) {
    tg::json::Value renamed = tg::json::Value::object();
    for (size_t i = 0; i < c.size(); ++i)
      if (c.keys()[i] != "dtype") renamed.set(c.keys()[i], c.values()[i]);
    c = renamed.set("torch_dtype", "bfloat16");
  });
  EXPECT_EQ(tg::nn::pretrained_dtype(older), tg::kBFloat16);
  EXPECT_EQ(tg::nn::pretrained_dtype(copy_of_tiny_llama(dir, "f16", [](auto& c) { c.set("dtype", "float16"); })),
            tg::kFloat32);
  EXPECT_ERROR_HAS(tg::nn::from_pretrained(copy_of_tiny_llama(dir, "odd", [](auto& c) { c.set("dtype", "int8"); })),
                   "dtype is \"int8\"", "\"bfloat16\"", "options.dtype");

  std::string log;
  const std::string out = dir / "o";
  ASSERT_EQ(finetune("--base " + bf16 + " --data " + write_task(dir) + kQuick + "--merge --out " + out, dir, &log), 0)
      << log;
  EXPECT_TRUE(has(log, "LlamaForCausalLM") && has(log, "bfloat16), 128-token context")) << log;
  EXPECT_EQ(tg::json::parse(read(out + "/merged/config.json")).at("dtype").as_string(), "bfloat16");
  for (const auto& t : tg::nn::pretrained_tensors(out + "/merged")) EXPECT_EQ(t.code, "BF16") << t.name;
  ASSERT_EQ(finetune("--base " + bf16 + " --data " + write_task(dir) + kQuick + "--dtype f32 --out " + (dir / "f32"),
                     dir, &log), 0) << log;
  EXPECT_TRUE(has(log, "float32), 128-token context")) << log;
}

// 3. A fresh run into another run's --out is refused before the model loads, naming what is there
// and the ways out; --overwrite-output-dir removes the old run's checkpoints and logs first.
TEST(FinetuneCli, AFreshRunRefusesAnotherRunsOutUnlessTold) {
  TempDir dir;
  const std::string common =
      "--base " + kTinyLlama.string() + " --data " + write_task(dir) + kQuick + "--log-every 1 --out " + (dir / "o");
  std::string log;
  ASSERT_EQ(finetune(common + " --steps 3 --save-every 1", dir, &log), 0) << log;
  ASSERT_TRUE(fs::exists(dir / "o/checkpoint-3"));
  EXPECT_EQ(finetune(common, dir, &log), 2) << log;
  for (const char* part : {"holds another run's files (adapter, checkpoint-1, checkpoint-2, checkpoint-3, log.csv",
                           "--overwrite-output-dir", "--resume"})
    EXPECT_TRUE(has(log, part)) << part << "\n" << log;
  EXPECT_FALSE(model_loaded(log)) << log;
  ASSERT_EQ(finetune(common + " --overwrite-output-dir", dir, &log), 0) << log;
  EXPECT_FALSE(fs::exists(dir / "o/checkpoint-3")) << "the old run's checkpoints stay";
  int64_t train_rows = 0;
  for (const auto& r : losses(dir / "o/log.csv")) train_rows += r.split == "train";
  EXPECT_EQ(train_rows, 2) << "the old run's log rows stay";
  // Continuing it is no fresh run.
  ASSERT_EQ(finetune(common + " --resume --steps 3", dir, &log), 0) << log;

  // The Trainer's check alike, with transformers' names.
  EXPECT_ERROR_HAS(tg::train::prepare_fresh_output_dir(dir / "o", false), "holds another run's files",
                   "overwrite_output_dir", "resume_from_checkpoint");
}

// 3. Two runs into one --out: the second fails at once, naming the folder and the first's pid.
TEST(FinetuneCli, ASecondRunIntoALockedOutFailsAtOnceNamingThePid) {
  TempDir dir;
  const auto held = tg::train::OutputDirLock::acquire(dir / "o");  // as a run in this process holds it
  EXPECT_EQ(tg::train::OutputDirLock::acquire(dir / "o"), held) << "one process shares its hold";
  std::string log;
  EXPECT_EQ(finetune("--base " + kTinyLlama.string() + " --data " + write_task(dir) + kQuick + "--out " + (dir / "o"), dir,
                     &log), 1);
  EXPECT_TRUE(has(log, "output_dir '" + (dir / "o") + "' is in use by another run (pid " + std::to_string(getpid())))
      << log;
  EXPECT_FALSE(model_loaded(log)) << log;
}

// 4. Rows cut at --seq: refused before the model loads when the cut loses what is learned, with
// the longest row, the share lost and a --seq that keeps every row; --truncation-mode keep_end
// keeps the replies; --allow-truncation accepts a loss.
TEST(FinetuneCli, RowsCutAwayAtSeqAreRefusedBeforeTheModelLoads) {
  TempDir dir;
  const std::string base = chat_base(dir), chat = write_chat(dir, 40);
  const std::string common = "--base " + base + " --data " + chat + kQuick + "--out ";
  std::string log;
  EXPECT_EQ(finetune(common + (dir / "a"), dir, &log), 2);
  for (const char* part : {"(its training split): 36 of 36 examples are longer than --seq 32 (the longest, example",
                           "they lose 100.0% of the learned tokens", "raise --seq (--seq 128 keeps every example whole) or "
                           "keep the ends with --truncation-mode keep_end\n"})
    EXPECT_TRUE(has(log, part)) << part << "\n" << log;
  EXPECT_FALSE(has(log, "--allow-truncation")) << "nothing would be left to train on:\n" << log;
  EXPECT_FALSE(model_loaded(log)) << log;
  ASSERT_EQ(finetune(common + (dir / "b") + " --truncation-mode keep_end", dir, &log), 0) << log;
  for (const LossRow& r : losses(dir / "b/log.csv")) EXPECT_TRUE(std::isfinite(r.loss)) << r.step;

  // One long reply among short rows: its loss is refused unless accepted.
  std::string mixed = read(write_chat(dir, 2));
  mixed += R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ")" +
           std::string(200, 'x') + R"("}]})" + "\n";
  write(dir / "mixed.jsonl", mixed);
  const std::string loose = "--base " + base + " --data " + (dir / "mixed.jsonl") + kQuick + "--seq 64 --out ";
  EXPECT_EQ(finetune(loose + (dir / "c"), dir, &log), 2);
  EXPECT_TRUE(has(log, "1 of 4 examples are longer than --seq 64")) << log;
  EXPECT_TRUE(has(log, "or pass --allow-truncation to train on what is left")) << log;
  ASSERT_EQ(finetune(loose + (dir / "d") + " --allow-truncation", dir, &log), 0) << log;
  EXPECT_TRUE(has(log, "examples are longer than --seq 64")) << log;
}

// 7. --targets: all-linear (every Linear but the head), and a name matching no Linear refused
// before the model loads, listing the model's Linear layers.
TEST(FinetuneCli, TargetsAllLinearAndAMisspeltOneNamingTheLinearLayers) {
  TempDir dir;
  const std::string common = "--base " + kTinyLlama.string() + " --data " + write_task(dir) + kQuick + "--out ";
  std::string log;
  ASSERT_EQ(finetune(common + (dir / "auto"), dir, &log), 0) << log;  // peft's default for Llama
  const tg::json::Value auto_cfg = tg::json::parse(read(dir / "auto/adapter/adapter_config.json"));
  std::vector<std::string> defaults;
  for (const auto& t : auto_cfg.at("target_modules").as_array()) defaults.push_back(t.as_string());
  EXPECT_EQ(defaults, (std::vector<std::string>{"q_proj", "v_proj"}));
  ASSERT_EQ(finetune(common + (dir / "all") + " --targets all-linear", dir, &log), 0) << log;
  const tg::json::Value cfg = tg::json::parse(read(dir / "all/adapter/adapter_config.json"));
  const auto& targets = cfg.at("target_modules").as_array();
  const int64_t layers = tg::json::parse(read(kTinyLlama / "config.json")).at("num_hidden_layers").as_int();
  EXPECT_EQ(static_cast<int64_t>(targets.size()), 7 * layers);
  for (const auto& t : targets) EXPECT_EQ(t.as_string().find("lm_head"), std::string::npos);
  EXPECT_EQ(finetune(common + (dir / "typo") + " --targets q_proj,v_prj", dir, &log), 2);
  EXPECT_TRUE(has(log, "--targets: 'v_prj' names no Linear layer of --base")) << log;
  for (const char* name : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    EXPECT_TRUE(has(log.substr(log.find("its Linear layers are")), name)) << name << "\n" << log;
  EXPECT_FALSE(model_loaded(log)) << log;
}

// 8. --num-train-epochs counts the steps as transformers does; a given --steps wins.
TEST(FinetuneCli, NumTrainEpochsCountsTheStepsAsTransformers) {
  TempDir dir;
  const std::string common = "--base " + kTinyLlama.string() + " --data " + write_task(dir, 40) +
                             " --warmup 1 --batch 4 --seq 32 --eval-every 0 --sample-tokens 0 --threads 1 --out ";
  std::string log;
  ASSERT_EQ(finetune(common + (dir / "e") + " --num-train-epochs 1.5", dir, &log), 0) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("training: (\\d+) rows"))) << log;
  const int64_t want = tg::train::steps_for_epochs(1.5, std::stoll(m[1]), 4, 1);
  // the line ends there on the CPU, or goes on with ", the step replayed as a CUDA graph" on a GPU
  const std::regex steps_line("steps 1-" + std::to_string(want) + "[\n,]"), two_steps("steps 1-2[\n,]");
  EXPECT_TRUE(std::regex_search(log, steps_line)) << want << "\n" << log;
  ASSERT_EQ(finetune(common + (dir / "s") + " --num-train-epochs 1.5 --steps 2", dir, &log), 0) << log;
  EXPECT_TRUE(has(log, "--steps 2 given: --num-train-epochs is unused")) << log;
  EXPECT_TRUE(std::regex_search(log, two_steps)) << log;
}

// 10. The end of a run: its time and the commands that use what it wrote.
TEST(FinetuneCli, TheEndOfARunSaysItsTimeAndHowToUseTheResult) {
  TempDir dir;
  std::string log;
  ASSERT_EQ(finetune("--base " + kTinyLlama.string() + " --data " + write_task(dir) + kQuick + "--merge --out " +
                         (dir / "o"), dir, &log), 0) << log;
  const std::string base = fs::absolute(kTinyLlama).lexically_normal().string(), out = dir / "o";
  for (const std::string& part :
       std::vector<std::string>{"finished in ", "memory estimate: ~",
        "PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(\"" + base + "\"), \"" + out + "/adapter\")",
        "vllm serve " + base + " --enable-lora --lora-modules o=" + out + "/adapter",
        "AutoModelForCausalLM.from_pretrained(\"" + out + "/merged\")",
        "examples/generate --model " + base + " --adapter " + out + "/adapter"})
    EXPECT_TRUE(has(log, part)) << part << "\n" << log;
}

// 2. Too large a model for the memory there is: refused before loading with the estimate, what is
// available and the remedies. The folder's weights are a 1 TiB sparse file: only its header is read.
TEST(FinetuneCli, AModelTooLargeForMemoryIsRefusedBeforeLoading) {
  TempDir dir;
  const std::string base = copy_of_tiny_llama(dir, "huge");
  write_header_only_safetensors(base + "/model.safetensors", "model.layers.0.mlp.up_proj.weight", "[1048576, 262144]",
                                uint64_t{1} << 40);
  std::string log;
  EXPECT_EQ(finetune("--base " + base + " --data " + write_task(dir) + kQuick + "--device cpu --out " + (dir / "o"), dir,
                     &log), 2);
  for (const char* part : {"memory estimate: ~", "the run needs ~1", "GiB available", "on the host",
                           "--load-in-4bit", "--dtype bf16", "--gradient-checkpointing", "a smaller --batch"})
    EXPECT_TRUE(has(log, part)) << part << "\n" << log;
  EXPECT_FALSE(model_loaded(log)) << log;
}

// 2b. --tiled-mlp tiles gated MLPs: a folder without one (GPT-2's c_fc / c_proj) is refused before
// loading; a Llama's runs tiled.
TEST(FinetuneCli, TiledMlpWithoutAGatedMlpIsRefusedBeforeLoading) {
  TempDir dir;
  const std::string base = copy_of_tiny_llama(dir, "ungated");
  write_header_only_safetensors(base + "/model.safetensors", "transformer.h.0.mlp.c_fc.weight", "[64, 16]", 4096);
  std::string log;
  const std::string flags = " --data " + write_task(dir) + kQuick + "--device cpu --tiled-mlp 16 --out ";
  EXPECT_EQ(finetune("--base " + base + flags + (dir / "o"), dir, &log), 2);
  EXPECT_TRUE(has(log, "--tiled-mlp: '" + base + "' has no gated MLP (mlp.gate_proj or mlp.gate_up_proj)")) << log;
  EXPECT_FALSE(model_loaded(log)) << log;
  ASSERT_EQ(finetune("--base " + kTinyLlama.string() + flags + (dir / "t"), dir, &log), 0) << log;
  EXPECT_TRUE(has(log, "tiled MLP: 16 tokens a chunk")) << log;
}

// 9. An adapter loads onto the base it was trained on: another one is refused naming both (peft's
// base_model_name_or_path, filled from the model's folder as peft does), unless overridden.
TEST(FinetuneCli, AnAdapterOfAnotherBaseIsRefusedNamingBoth) {
  TempDir dir;
  std::string log;
  const std::string common = "--base " + kTinyLlama.string() + " --data " + write_task(dir) + kQuick;
  ASSERT_EQ(finetune(common + "--out " + (dir / "o"), dir, &log), 0) << log;
  const std::string other = copy_of_tiny_llama(dir, "Qwen2.5-0.5B");  // the same shapes, another name
  const std::string gen = "--prompt hello --max-new-tokens 2 --threads 1 --adapter " + (dir / "o/adapter") + " --model ";
  EXPECT_EQ(run(TG_GENERATE_EXAMPLE, gen + other, dir, &log), 1);
  EXPECT_TRUE(has(log, "the adapter was trained on '" + kTinyLlama.string() + "', the model is '" + other + "'")) << log;
  EXPECT_EQ(run(TG_GENERATE_EXAMPLE, gen + other + " --ignore-base-mismatch", dir, &log), 0) << log;
  EXPECT_EQ(run(TG_GENERATE_EXAMPLE, gen + kTinyLlama.string(), dir, &log), 0) << log;

  // A base with another shape in config.json is named by its fields.
  const std::string wider = copy_of_tiny_llama(dir, "tiny_llama_wide", [](auto& c) { c.set("num_hidden_layers", 9); });
  auto model = tg::nn::from_pretrained(kTinyLlama.string());
  EXPECT_TRUE(has(tg::peft::adapter_base_mismatch(wider, model->name_or_path, model->config_json()),
                  "whose config.json differs from the model's (num_hidden_layers 9 there, 2 here)"));
  EXPECT_EQ(tg::peft::adapter_base_mismatch(kTinyLlama.string(), model->name_or_path, model->config_json()), "");
  // The API: save_adapter records the model's folder; load_adapter checks it.
  auto onto = tg::nn::from_pretrained(other);
  const std::string refused = tg::test::error_of([&] { tg::peft::load_adapter(*onto, dir / "o/adapter"); });
  EXPECT_TRUE(has(refused, "the model is '" + other + "'") && has(refused, "ignore_base_mismatch")) << refused;
  tg::peft::load_adapter(*onto, dir / "o/adapter", tg::default_generator(), {.ignore_base_mismatch = true});
  tg::peft::save_adapter(*onto, dir / "resaved", {});
  EXPECT_EQ(tg::json::parse(read(dir / "resaved/adapter_config.json")).at("base_model_name_or_path").as_string(), other);

  // --resume of a checkpoint written by another program (no flags file): its adapter's base is checked.
  ASSERT_EQ(finetune(common + "--steps 3 --stop-at 1 --out " + (dir / "r"), dir, &log), 0) << log;
  fs::remove(dir / "r/checkpoint-1/lora_finetune_flags.json");
  const std::string resume = common + "--steps 3 --resume " + (dir / "r/checkpoint-1") + " --out " + (dir / "r2");
  EXPECT_EQ(finetune(std::regex_replace(resume, std::regex(kTinyLlama.string()), other), dir, &log), 2) << log;
  EXPECT_TRUE(has(log, "the adapter was trained on '" + kTinyLlama.string() + "'")) << log;
  EXPECT_TRUE(has(log, "--ignore-base-mismatch")) << log;
}

// 5. --show-labels: rows as trained, the learned text marked, and no model loaded.
TEST(FinetuneCli, ShowLabelsMarksTheLearnedTextWithoutLoadingTheModel) {
  TempDir dir;
  std::string log;
  ASSERT_EQ(finetune("--base " + chat_base(dir) + " --data " + write_chat(dir, 2) + " --seq 64 --show-labels 2 --out " +
                         (dir / "o"), dir, &log), 0) << log;
  EXPECT_TRUE(has(log, "--- example 0: ")) << log;
  EXPECT_TRUE(has(log, "--- example 1: ")) << log;
  EXPECT_FALSE(has(log, "--- example 2: ")) << log;
  EXPECT_TRUE(has(log, "word word what does bob like?[[bob likes tea.</s>]]\n")) << log;
  EXPECT_FALSE(model_loaded(log)) << log;
  EXPECT_FALSE(fs::exists(dir / "o/log.csv"));
}

// 6. A template that refuses system messages (Gemma 2's) fails before the model loads, naming the
// row and --system-message; merge puts the system text into the first user turn.
TEST(FinetuneCli, ASystemMessageTheTemplateRefusesIsNamedAndMerged) {
  TempDir dir;
  const fs::path templates = fs::path(TG_TESTS_DIR) / "fixtures" / "chat_dataset" / "gemma2";
  const auto tok = tg::data::Tokenizer::from_pretrained(templates.string());
  tg::nn::LlamaForCausalLM model({.vocab_size = tok.vocab_size(), .hidden_size = 32, .intermediate_size = 64,
                                  .num_hidden_layers = 1, .num_attention_heads = 4, .num_key_value_heads = 2,
                                  .max_position_embeddings = 128});
  const std::string base = dir / "gemma_chat";
  tg::nn::save_pretrained(model, base);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(templates / f, fs::path(base) / f);
  std::string chat;
  for (int i = 0; i < 30; ++i)
    chat += R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "what does bob )"
            R"(like?"}, {"role": "assistant", "content": "bob likes tea."}]})" "\n";
  write(dir / "chat.jsonl", chat);
  const std::string common = "--base " + base + " --data " + (dir / "chat.jsonl") + kQuick + "--seq 64 --out ";
  std::string log;
  EXPECT_EQ(finetune(common + (dir / "a"), dir, &log), 1);
  for (const char* part : {"chat.jsonl' line 1", "System role not supported", "system_message \"merge\""})
    EXPECT_TRUE(has(log, part)) << part << "\n" << log;
  EXPECT_FALSE(model_loaded(log)) << log;
  ASSERT_EQ(finetune(common + (dir / "b") + " --system-message merge", dir, &log), 0) << log;
  ASSERT_EQ(finetune(common + (dir / "c") + " --system-message drop --show-labels 1", dir, &log), 0) << log;
  EXPECT_FALSE(has(log, "Be brief.")) << log;
  ASSERT_EQ(finetune(common + (dir / "d") + " --system-message merge --show-labels 1", dir, &log), 0) << log;
  EXPECT_TRUE(has(log, "Be brief.")) << log;
}
