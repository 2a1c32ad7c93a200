// examples/lora_finetune end to end on the tiny transformers folders of tests/fixtures/tokenizers
// (tiny_llama, tiny_gpt2: save_pretrained with their tokenizers): a JSONL fine-tune whose loss
// falls, the adapter loaded back (its logits those of the merged folder), resuming and extending
// runs through train::Trainer, and each error the program promises, named by its flag.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/autograd.h"
#include "core/detail/utf8.h"
#include "core/factory.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "examples/common/printable.h"
#include "io/gguf.h"
#include "io/json.h"
#include "nn/generation/generation.h"
#include "nn/models/gemma.h"
#include "nn/models/llama.h"
#include "nn/models/olmo2.h"
#include "nn/models/phi3.h"
#include "nn/models/pretrained.h"
#include "nn/models/smollm3.h"
#include "peft/lora.h"
#include "tests/example_runs.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;
using namespace tg::test;

namespace {

std::vector<float> logits(tg::nn::Module& m, const std::vector<int64_t>& ids) {
  tg::NoGradGuard g;
  m.eval();
  return m.forward(tg::from_vector(ids, {1, static_cast<int64_t>(ids.size())})).to_vector<float>();
}

class LoraFinetuneHf : public ::testing::TestWithParam<std::string> {};

// The attention's projections: peft's default (q_proj, v_proj; c_attn) learns too little of the task
// in 40 steps of these tiny models, so the tests name more, as a user would.
std::string attention_targets(const std::string& folder) {
  return folder == "tiny_gpt2" ? " --targets c_attn,c_proj " : " --targets q_proj,k_proj,v_proj,o_proj ";
}

TEST_P(LoraFinetuneHf, JsonlFineTuneLowersTheLossAndItsAdapterLoadsBack) {
  const fs::path base = fixtures() / GetParam();
  ASSERT_TRUE(fs::exists(base / "config.json")) << "no fixture " << base << " (make_fixtures.py writes it)";
  TempDir dir;
  const std::string data = write_task(dir), out = dir / "out";
  std::string log;
  ASSERT_EQ(finetune("--base " + base.string() + " --data " + data + " --steps 40 --warmup 2 --batch 4 --seq 48 --log-every 1 "
                     "--lr 1e-2 --eval-every 20 --sample-tokens 4 --threads 2 --merge --out " + out +
                     attention_targets(GetParam()), dir, &log), 0) << log;
  EXPECT_NE(log.find("sample (greedy)"), std::string::npos) << log;

  const std::vector<LossRow> rows = losses(out + "/log.csv");
  std::vector<double> train, val;
  for (const auto& r : rows) (r.split == "train" ? train : val).push_back(r.loss);
  ASSERT_EQ(train.size(), 40u);
  ASSERT_EQ(val.size(), 2u);
  EXPECT_GT(loss_drop(train), 0.2) << "the training loss did not fall";
  EXPECT_LT(val[1], val[0]);

  // The adapter: peft's files, this base, the targets named.
  const tg::json::Value cfg = tg::json::parse(read(out + "/adapter/adapter_config.json"));
  EXPECT_EQ(cfg.at("base_model_name_or_path").as_string(), base.string());
  std::vector<std::string> targets;
  for (const auto& t : cfg.at("target_modules").as_array()) targets.push_back(t.as_string());
  std::sort(targets.begin(), targets.end());
  const bool gpt2 = GetParam() == "tiny_gpt2";
  const std::vector<std::string> want = gpt2 ? std::vector<std::string>{"c_attn", "c_proj"}
                                             : std::vector<std::string>{"k_proj", "o_proj", "q_proj", "v_proj"};
  EXPECT_EQ(targets, want);
  EXPECT_EQ(cfg.at("fan_in_fan_out").as_bool(), gpt2);

  // Loaded back onto the base, it computes what the merged folder computes, which is not the base.
  const std::vector<int64_t> ids = {1, 5, 9, 2, 7, 3};
  auto plain = tg::nn::from_pretrained(base.string());
  const std::vector<float> before = logits(*plain, ids);
  tg::peft::load_adapter(*plain, out + "/adapter");
  const std::vector<float> adapted = logits(*plain, ids);
  auto merged = tg::nn::from_pretrained(out + "/merged");
  const std::vector<float> folded = logits(*merged, ids);
  ASSERT_EQ(adapted.size(), folded.size());
  double diff = 0, change = 0, scale = 0;
  for (size_t i = 0; i < adapted.size(); ++i) {
    diff = std::max(diff, std::abs(double(adapted[i]) - folded[i]));
    change = std::max(change, std::abs(double(adapted[i]) - before[i]));
    scale = std::max(scale, std::abs(double(adapted[i])));
  }
  EXPECT_LT(diff, 1e-5 * scale);
  EXPECT_GT(change, 1e-3 * scale) << "the adapter changed nothing";
  // The merged folder carries the tokenizer.
  const auto tok = tg::data::Tokenizer::from_pretrained(base.string());
  EXPECT_EQ(tg::data::Tokenizer::from_pretrained(out + "/merged").encode("Q: what does bob like?"),
            tok.encode("Q: what does bob like?"));
}

TEST_P(LoraFinetuneHf, GradientAccumulationMatchesTheLargerBatch) {
  const fs::path base = fixtures() / GetParam();
  ASSERT_TRUE(fs::exists(base / "config.json"));
  TempDir dir;
  const std::string common = "--base " + base.string() + " --data " + write_task(dir) +
                             " --steps 3 --warmup 1 --seq 48 --eval-every 0 --sample-tokens 0 --threads 1 --log-every 1 ";
  ASSERT_EQ(finetune(common + "--batch 4 --out " + (dir / "big"), dir), 0);
  ASSERT_EQ(finetune(common + "--batch 2 --grad-accum 2 --out " + (dir / "accum"), dir), 0);
  const auto big = losses(dir / "big/log.csv"), accum = losses(dir / "accum/log.csv");
  ASSERT_EQ(big.size(), accum.size());
  for (size_t i = 0; i < big.size(); ++i) EXPECT_NEAR(big[i].loss, accum[i].loss, 1e-4 * big[i].loss) << "row " << i;
}

// Checkpointing changes memory and time, not a bit of the training: with LoRA dropout on, the
// losses and the trained adapter's bytes are those of the run without.
TEST_P(LoraFinetuneHf, GradientCheckpointingTrainsTheSameAdapterBitForBit) {
  const fs::path base = fixtures() / GetParam();
  ASSERT_TRUE(fs::exists(base / "config.json"));
  TempDir dir;
  const std::string common = "--base " + base.string() + " --data " + write_task(dir) +
                             " --steps 4 --warmup 1 --batch 2 --seq 32 --dropout 0.1 --eval-every 2 --eval-batches 1 "
                             "--sample-tokens 0 --threads 1 --log-every 1 ";
  std::string log;
  ASSERT_EQ(finetune(common + "--out " + (dir / "plain"), dir, &log), 0) << log;
  ASSERT_EQ(finetune(common + "--gradient-checkpointing --out " + (dir / "ckpt"), dir, &log), 0) << log;
  EXPECT_NE(log.find("gradient checkpointing: each decoder layer recomputed"), std::string::npos) << log;
  const auto plain = losses(dir / "plain/log.csv"), ckpt = losses(dir / "ckpt/log.csv");
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i].loss, ckpt[i].loss) << "row " << i;
  const std::string adapter = "/adapter/adapter_model.safetensors";
  EXPECT_TRUE(read(dir / ("plain" + adapter)) == read(dir / ("ckpt" + adapter))) << "the adapters differ";
}

// --full: every weight trains, the model (not an adapter) is written, a resume is bit-exact.
TEST_P(LoraFinetuneHf, FullFineTuningTrainsEveryWeightAndResumesBitExactly) {
  const fs::path base = fixtures() / GetParam();
  ASSERT_TRUE(fs::exists(base / "config.json"));
  TempDir dir;
  const std::string common = "--base " + base.string() + " --data " + write_task(dir) +
                             " --full --steps 4 --warmup 1 --batch 2 --seq 32 --eval-every 2 --eval-batches 1 "
                             "--sample-tokens 0 --threads 1 ";
  std::string log;
  ASSERT_EQ(finetune(common + "--out " + (dir / "straight"), dir, &log), 0) << log;
  EXPECT_NE(log.find("trainable%: 100.0000"), std::string::npos) << log;
  EXPECT_NE(log.find("fine-tuned model: "), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "straight/adapter"));
  ASSERT_EQ(finetune(common + "--out " + (dir / "resumed") + " --stop-at 2", dir, &log), 0) << log;
  ASSERT_EQ(finetune(common + "--out " + (dir / "resumed") + " --resume", dir, &log), 0) << log;
  EXPECT_TRUE(read(dir / "straight/model/model.safetensors") == read(dir / "resumed/model/model.safetensors"))
      << "the resumed run trained another model";
  auto trained = tg::nn::from_pretrained(dir / "straight/model");
  auto orig = tg::nn::from_pretrained(base.string());
  const auto want = orig->named_parameters();
  const auto got = trained->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NE(got[i].second.template to_vector<float>(), want[i].second.template to_vector<float>())
        << got[i].first << " did not train";
  ASSERT_EQ(finetune(common + "--merge --out " + (dir / "merge"), dir, &log), 2) << log;
  EXPECT_NE(log.find("--merge folds LoRA into the base: with --full the model itself is written"), std::string::npos) << log;
}

// QLoRA: --load-in-4bit trains LoRA on an NF4 base (loss falls), reports the peak memory, and
// --merge writes a dense folder computing what the adapter on the 4-bit base computes.
TEST_P(LoraFinetuneHf, LoadIn4bitTrainsOnAFourBitBaseAndMergesDense) {
  const fs::path base = fixtures() / GetParam();
  ASSERT_TRUE(fs::exists(base / "config.json"));
  TempDir dir;
  const std::string data = write_task(dir), out = dir / "out";
  std::string log;
  ASSERT_EQ(finetune("--base " + base.string() + " --data " + data + attention_targets(GetParam()) +
                     "--load-in-4bit --steps 40 --warmup 2 --log-every 1 "
                     "--batch 4 --seq 48 --lr 1e-2 --eval-every 0 --sample-tokens 0 --threads 2 --merge --out " + out,
                     dir, &log), 0) << log;
  EXPECT_NE(log.find("peak memory: host"), std::string::npos) << log;
  EXPECT_NE(log.find("merge_and_unload: the 4-bit base is dequantised to float32"), std::string::npos) << log;
  const std::vector<double> train = train_losses(out + "/log.csv");
  ASSERT_EQ(train.size(), 40u);
  EXPECT_GT(loss_drop(train), 0.15) << "the training loss did not fall";  // as the bf16 base's: 6.385 -> 6.170

  EXPECT_EQ(tg::json::parse(read(out + "/merged/config.json")).find("quantization_config"), nullptr);
  const std::vector<int64_t> ids = {1, 5, 9, 2, 7, 3};
  auto quantised = tg::nn::from_pretrained(
      base.string(), {.quantization = {.load_in_4bit = true, .quant_type = "nf4", .double_quant = true,
                                       .compute_dtype = tg::kFloat32}});
  tg::peft::load_adapter(*quantised, out + "/adapter");
  const std::vector<float> adapted = logits(*quantised, ids);
  auto merged = tg::nn::from_pretrained(out + "/merged");
  const std::vector<float> folded = logits(*merged, ids);
  ASSERT_EQ(adapted.size(), folded.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < adapted.size(); ++i) {
    diff = std::max(diff, std::abs(double(adapted[i]) - folded[i]));
    scale = std::max(scale, std::abs(double(adapted[i])));
  }
  EXPECT_LT(diff, 1e-5 * scale);
  EXPECT_EQ(finetune("--base " + base.string() + " --data " + data + " --load-in-4bit --full --out " + out, dir, &log),
            2);
  EXPECT_NE(log.find("drop --load-in-4bit"), std::string::npos) << log;
}

// --load-in-fp8 trains LoRA on an FP8 base (loss falls) and --merge dequantises it, saying so.
TEST(LoraFinetune, LoadInFp8TrainsOnAnFp8BaseAndMergesDense) {
  const fs::path base = fixtures() / "tiny_llama";
  TempDir dir;
  const std::string data = write_task(dir), out = dir / "out";
  std::string log;
  ASSERT_EQ(finetune("--base " + base.string() + " --data " + data + attention_targets("tiny_llama") +
                     "--load-in-fp8 --steps 40 --warmup 2 --log-every 1 --batch 4 --seq 48 --lr 1e-2 --eval-every 0 "
                     "--sample-tokens 0 --threads 2 --merge --out " + out,
                     dir, &log), 0) << log;
  EXPECT_NE(log.find("merge_and_unload: the FP8 base is dequantised to float32"), std::string::npos) << log;
  const std::vector<double> train = train_losses(out + "/log.csv");
  ASSERT_EQ(train.size(), 40u);
  EXPECT_GT(loss_drop(train), 0.15) << "the training loss did not fall";
  EXPECT_EQ(tg::json::parse(read(out + "/merged/config.json")).find("quantization_config"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Folders, LoraFinetuneHf, ::testing::Values("tiny_llama", "tiny_gpt2"));

// Issue 34 end to end with real tokenizers: random tiny models of every decoder family (Llama 3,
// Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-3, SmolLM3, OLMo 2) with the vocabularies of
// tests/fixtures/tokenizers' llama3 (SmolLM3's layout too), qwen2 (byte-level BPE, as OLMo 2's) and
// spm_metaspace (sentencepiece's layout: Gemma's, Mistral's and Phi-3's) tokenizer.json files, saved by save_pretrained with those files; then
// examples/lora_finetune --base trains an adapter on each and examples/generate continues a prompt
// with it into text the tokenizer decodes.
TEST(LoraFinetune, RealTokenizerFamiliesTrainSaveAndGenerate) {
  auto llama_like = [](const char* architecture, int64_t vocab) {
    tg::nn::LlamaConfig c;
    c.architecture = architecture;
    c.vocab_size = vocab;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 128;
    c.tie_word_embeddings = true;
    c.initializer_range = 0.2;  // activations large enough that attention's adapters move the loss
    return c;
  };
  for (const std::string family : {"llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "smollm3", "olmo2"}) {
    SCOPED_TRACE(family);
    const std::string tokenizer = family == "llama3" || family == "smollm3"                       ? "llama3"
                                  : family == "qwen2" || family == "qwen3" || family == "olmo2" ? "qwen2"
                                                                                                : "spm_metaspace";
    const fs::path tok_dir = fixtures() / tokenizer;
    const auto tok = tg::data::Tokenizer::from_pretrained(tok_dir.string());
    tg::Generator gen(1);
    std::shared_ptr<tg::nn::CausalLM> model;
    if (family == "llama3") {
      tg::nn::LlamaConfig c = llama_like("LlamaForCausalLM", tok.vocab_size());
      c.rope_theta = 500000.0;
      c.rope_scaling = {.rope_type = "llama3", .factor = 32.0, .original_max_position_embeddings = 64};
      model = std::make_shared<tg::nn::LlamaForCausalLM>(c, gen);
    } else if (family == "mistral") {
      tg::nn::LlamaConfig c = llama_like("MistralForCausalLM", tok.vocab_size());
      c.tie_word_embeddings = false;
      c.sliding_window = 16;  // shorter than the training sequences and the generation
      model = std::make_shared<tg::nn::LlamaForCausalLM>(c, gen);
    } else if (family == "qwen2") {
      tg::nn::LlamaConfig c = llama_like("Qwen2ForCausalLM", tok.vocab_size());
      c.qkv_bias = true;
      c.rope_theta = 1e6;
      model = std::make_shared<tg::nn::LlamaForCausalLM>(c, gen);
    } else if (family == "qwen3") {
      tg::nn::LlamaConfig c = llama_like("Qwen3ForCausalLM", tok.vocab_size());
      c.attention_head_dim = 16;
      c.qk_norm = true;
      c.rope_theta = 1e6;
      model = std::make_shared<tg::nn::LlamaForCausalLM>(c, gen);
    } else if (family == "phi3") {
      tg::nn::LlamaConfig c = llama_like("Phi3ForCausalLM", tok.vocab_size());
      c.tie_word_embeddings = false;
      model = std::make_shared<tg::nn::Phi3ForCausalLM>(c, gen);
    } else if (family == "smollm3") {
      tg::nn::SmolLM3Config c;
      static_cast<tg::nn::LlamaConfig&>(c) = llama_like("SmolLM3ForCausalLM", tok.vocab_size());
      c.no_rope_layers = {1, 0};
      c.use_sliding_window = true;
      c.sliding_window = 16;  // the NoPE layer's, shorter than the training sequences and the generation
      model = std::make_shared<tg::nn::SmolLM3ForCausalLM>(c, gen);
    } else if (family == "olmo2") {
      tg::nn::LlamaConfig c = llama_like("Olmo2ForCausalLM", tok.vocab_size());
      c.tie_word_embeddings = false;
      model = std::make_shared<tg::nn::Olmo2ForCausalLM>(c, gen);
    } else {
      tg::nn::GemmaConfig c;
      c.architecture = family == "gemma2" ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM";
      c.vocab_size = tok.vocab_size();
      c.hidden_size = 32;
      c.qk_norm = family == "gemma3";
      if (family == "gemma3") c.attn_logit_softcapping = c.final_logit_softcapping = 0;  // Gemma 2 keeps its defaults
      c.sliding_window = 16;  // shorter than the training sequences and the generation
      c.layer_types = {"sliding_attention", "full_attention"};
      c.rope_theta = 1e6;
      c.initializer_range = 0.2;
      model = std::make_shared<tg::nn::GemmaForCausalLM>(c, gen);
    }
    TempDir dir;
    const std::string base = dir / "base";
    tg::nn::save_pretrained(*model, base);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(tok_dir / f, fs::path(base) / f);

    std::string log;
    // peft has no default targets for Phi-3: they are named.
    const std::string targets = family == "phi3" ? " --targets qkv_proj,o_proj" : "";
    ASSERT_EQ(finetune("--base " + base + " --data " + write_task(dir) + " --steps 30 --warmup 2 --batch 4 --seq 48 "
                       "--lr 2e-2 --eval-every 0 --log-every 1 --sample-tokens 0 --threads 2 --out " + (dir / "out") +
                       targets, dir, &log),
              0) << log;
    std::vector<double> train;
    for (const auto& r : losses(dir / "out/log.csv"))
      if (r.split == "train") train.push_back(r.loss);
    ASSERT_EQ(train.size(), 30u);
    EXPECT_LT(train.back() + train[train.size() - 2], train[0] + train[1] - 0.5) << "the training loss did not fall: "
                                                                                 << train[0] << " .. " << train.back();
    ASSERT_TRUE(fs::exists(dir / "out/adapter/adapter_model.safetensors"));
    const tg::json::Value cfg = tg::json::parse(read(dir / "out/adapter/adapter_config.json"));
    EXPECT_EQ(cfg.at("base_model_name_or_path").as_string(), base);

    ASSERT_EQ(run(TG_GENERATE_EXAMPLE, "--model " + base + " --adapter " + (dir / "out/adapter") +
                                           " --prompt 'Q: what does bob like?' --max-new-tokens 24 --threads 2",
                  dir, &log, /*with_stderr=*/false),
              0) << read(dir / "err.txt");
    // What it printed: the decode of what the library generates with that adapter, text throughout.
    auto adapted = tg::nn::from_pretrained(base);
    tg::peft::load_adapter(*adapted, dir / "out/adapter");
    const std::vector<int32_t> prompt = tok.encode("Q: what does bob like?");
    const auto want = tg::nn::generate(
        *adapted, {prompt},
        {.max_new_tokens = 24, .eos_token_id = tg::nn::GenerationConfig::from_pretrained(base).eos_token_id})[0];
    ASSERT_GT(want.size(), prompt.size());
    const std::string text = tok.decode(want, /*skip_special_tokens=*/true);
    EXPECT_EQ(log, examples::printable(text, /*one_line=*/false) + "\n");
    EXPECT_TRUE(tg::utf8::is_valid(text)) << text;
  }
}

TEST(LoraFinetune, ResumeRefusesAChangedTrainingFlagByName) {
  const fs::path base = fixtures() / "tiny_gpt2";
  ASSERT_TRUE(fs::exists(base / "config.json"));
  TempDir dir;
  const std::string common = "--base " + base.string() + " --data " + write_task(dir) +
                             " --steps 6 --warmup 1 --batch 2 --seq 32 --eval-every 3 --sample-tokens 0 --log-every 1 --out " +
                             (dir / "o");
  ASSERT_EQ(finetune(common + " --stop-at 3", dir), 0);
  std::string log;
  EXPECT_EQ(finetune(common + " --resume --lr 5e-3 --rank 4", dir, &log), 2);
  EXPECT_NE(log.find("--lr: '2e-3' then, '5e-3' now"), std::string::npos) << log;
  EXPECT_NE(log.find("--rank: '8' then, '4' now"), std::string::npos) << log;
  EXPECT_NE(log.find("these may change: --out, --device"), std::string::npos) << log;
  // Cadence flags may change; the resumed run's SVG shows the whole run (steps 1-6).
  ASSERT_EQ(finetune(common + " --resume --eval-every 2", dir, &log), 0) << log;
  const auto rows = losses(dir / "o/log.csv");
  int64_t train_rows = 0;
  for (const auto& r : rows) train_rows += r.split == "train";
  EXPECT_EQ(train_rows, 6);
  const std::string svg = read(dir / "o/loss.svg");
  EXPECT_NE(svg.find("optimizer step"), std::string::npos);
  EXPECT_NE(svg.find("loss (cross-entropy, nats per token)"), std::string::npos);
  size_t points = 0;
  const std::string line = svg.substr(svg.find("<polyline"));
  for (size_t at = line.find("points='") + 8; line[at] != '\''; ++at) points += line[at] == ',';
  EXPECT_EQ(points, 6u) << "the train line covers steps 1-6";
}

// What a new user hit before the Trainer (issue 38): a finished run is extended by a larger --steps,
// a checkpoint of another --out resumes bit-exactly, and an edited data file is refused by name.
TEST(LoraFinetune, ARunIsExtendedMovedToAnotherOutAndRefusedOnEditedData) {
  const fs::path base = fixtures() / "tiny_gpt2";
  ASSERT_TRUE(fs::exists(base / "config.json"));
  TempDir dir;
  const std::string data = write_task(dir);
  const std::string common = "--base " + base.string() + " --data " + data +
                             " --warmup 1 --batch 2 --seq 32 --eval-every 0 --sample-tokens 0 --log-every 1 --threads 1 ";
  std::string log;
  ASSERT_EQ(finetune(common + "--steps 6 --out " + (dir / "straight"), dir, &log), 0) << log;

  // Stopped at 3 in one --out, resumed into another from that checkpoint's folder.
  ASSERT_EQ(finetune(common + "--steps 6 --stop-at 3 --out " + (dir / "a"), dir, &log), 0) << log;
  EXPECT_NE(log.find("stopped at step 3; checkpoint in " + (dir / "a/checkpoint-3")), std::string::npos) << log;
  ASSERT_EQ(finetune(common + "--steps 6 --out " + (dir / "b") + " --resume " + (dir / "a/checkpoint-3"), dir, &log), 0)
      << log;
  EXPECT_NE(log.find("resumed from step 3 of 6"), std::string::npos) << log;
  const std::string adapter = "/adapter/adapter_model.safetensors";
  EXPECT_TRUE(read(dir / ("straight" + adapter)) == read(dir / ("b" + adapter))) << "the moved resume trained another adapter";

  // A finished run of 6 steps extended to 8: the schedule re-planned over 8, as transformers does.
  ASSERT_EQ(finetune(common + "--steps 8 --resume --out " + (dir / "straight"), dir, &log), 0) << log;
  EXPECT_NE(log.find("resumed from step 6 of 8"), std::string::npos) << log;
  int64_t train_rows = 0;
  for (const auto& r : losses(dir / "straight/log.csv")) train_rows += r.split == "train";
  EXPECT_EQ(train_rows, 8);
  EXPECT_TRUE(fs::exists(dir / "straight/checkpoint-8/training_state.safetensors"));

  // The data edited since the checkpoint: refused, saying what changed (the rows or their count).
  std::string text = read(data);
  text.replace(text.find("alice"), 5, "ALICE");
  write(data, text);
  EXPECT_EQ(finetune(common + "--steps 10 --resume --out " + (dir / "straight"), dir, &log), 1) << log;
  EXPECT_NE(log.find("the train_dataset is not the one the checkpoint trained on"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "straight/checkpoint-9")) << "it trained on";
}

// save_total_limit keeps the newest checkpoints; the log has transformers' grad_norm column
// (before clipping), empty with --clip 0.
TEST(LoraFinetune, SaveTotalLimitKeepsTheNewestAndTheLogHasTheGradNorm) {
  const fs::path base = fixtures() / "tiny_gpt2";
  ASSERT_TRUE(fs::exists(base / "config.json"));
  TempDir dir;
  const std::string common = "--base " + base.string() + " --data " + write_task(dir) +
                             " --steps 6 --warmup 1 --batch 2 --seq 32 --eval-every 0 --sample-tokens 0 --threads 1 ";
  std::string log;
  ASSERT_EQ(finetune(common + "--save-every 2 --save-total-limit 2 --log-every 3 --out " + (dir / "o"), dir, &log), 0)
      << log;
  std::vector<std::string> kept;
  for (const auto& e : fs::directory_iterator(dir / "o"))
    if (e.path().filename().string().rfind("checkpoint-", 0) == 0) kept.push_back(e.path().filename().string());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"checkpoint-4", "checkpoint-6"}));
  EXPECT_TRUE(fs::exists(dir / "o/checkpoint-6/lora_finetune_flags.json"));
  auto grad_norms = [&](const std::string& csv) {
    std::vector<std::string> cells;
    std::istringstream in(read(csv));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line.substr(0, line.find(",grad_norm")), "step,epoch,loss,learning_rate");
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream ss(line);
      for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
      f.resize(9);
      if (!f[2].empty()) cells.push_back(f[4]);  // a training row's grad_norm
    }
    return cells;
  };
  const std::vector<std::string> norms = grad_norms(dir / "o/log.csv");
  ASSERT_EQ(norms.size(), 2u);  // steps 3 and 6
  for (const std::string& n : norms) EXPECT_GT(std::stod(n), 0) << n;
  ASSERT_EQ(finetune(common + "--clip 0 --log-every 3 --out " + (dir / "noclip"), dir, &log), 0) << log;
  EXPECT_EQ(grad_norms(dir / "noclip/log.csv"), (std::vector<std::string>{"", ""}));
}

TEST(LoraFinetune, DataTooShortOrNotTextIsAnErrorBeforeStepOneNamingTheFlag) {
  const fs::path base = fixtures() / "tiny_llama";
  ASSERT_TRUE(fs::exists(base / "config.json"));
  TempDir dir;
  write(dir / "short.jsonl", "{\"text\": \"tiny\"}\n");
  std::string log;
  const std::string b = "--base " + base.string() + " --steps 2 --out " + (dir / "o") + " ";
  EXPECT_EQ(finetune(b + "--data " + (dir / "short.jsonl") + " --seq 64", dir, &log), 2);
  EXPECT_NE(log.find("no training row of --seq 64 tokens"), std::string::npos) << log;
  EXPECT_NE(log.find("lower --seq"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "o/log.csv")) << "the error comes before step 1";
  const std::string data = write_task(dir, 12);
  EXPECT_EQ(finetune(b + "--data " + data + " --seq 48 --val-fraction 0.01", dir, &log), 2);
  EXPECT_NE(log.find("--val-fraction 0.01"), std::string::npos) << log;
  EXPECT_NE(log.find("pass --val"), std::string::npos) << log;
  write(dir / "v.jsonl", "{\"text\": \"a\"}\n");
  EXPECT_EQ(finetune(b + "--data " + data + " --seq 48 --val " + (dir / "v.jsonl"), dir, &log), 2);
  EXPECT_NE(log.find("--val '"), std::string::npos) << log;

  write(dir / "bin.txt", std::string("some text\n\xff\xfe\x00 more", 16));
  EXPECT_EQ(finetune(b + "--data " + (dir / "bin.txt") + " --seq 4", dir, &log), 1);
  EXPECT_NE(log.find("--data '" + (dir / "bin.txt") + "' is not text: invalid UTF-8 (byte 0xff) at byte 10, line 2"),
            std::string::npos) << log;
  EXPECT_NE(log.find("pass --bytes"), std::string::npos) << log;
  EXPECT_EQ(finetune(b + "--data " + (dir / "bin.txt") + " --seq 4 --bytes --val-fraction 0.3 --sample-tokens 0", dir,
                     &log), 0) << log;
}

TEST(LoraFinetune, AnUnknownFlagSuggestsTheNearestOne) {
  TempDir dir;
  std::string log;
  EXPECT_EQ(finetune("--lrr 1e-3", dir, &log), 2);
  EXPECT_NE(log.find("unknown flag --lrr (did you mean --lr?)"), std::string::npos) << log;
  EXPECT_EQ(finetune("--grad-acum 2", dir, &log), 2);
  EXPECT_NE(log.find("(did you mean --grad-accum?)"), std::string::npos) << log;
  EXPECT_EQ(finetune("--zzzzzz 1", dir, &log), 2);
  EXPECT_EQ(log.find("did you mean"), std::string::npos) << log;
  // transformers', peft's and TRL's names get ours (issue 47).
  for (const auto& [theirs, ours] : std::vector<std::pair<std::string, std::string>>{
           {"learning_rate", "lr"}, {"per_device_train_batch_size", "batch"}, {"gradient_accumulation_steps", "grad-accum"},
           {"max_steps", "steps"}, {"output_dir", "out"}, {"num_train_epochs", "num-train-epochs"}, {"lora_r", "rank"},
           {"lora_alpha", "alpha"}, {"lora_dropout", "dropout"}, {"max_seq_length", "seq"}, {"warmup_steps", "warmup"},
           {"weight_decay", "weight-decay"}, {"bf16", "dtype bf16"}, {"target_modules", "targets"},
           {"model_name_or_path", "base"}, {"gradient_checkpointing", "gradient-checkpointing"}}) {
    EXPECT_EQ(finetune("--" + theirs + " 1", dir, &log), 2) << theirs;
    EXPECT_NE(log.find("unknown flag --" + theirs + " (did you mean --" + ours + "?)"), std::string::npos) << log;
    // The message and a pointer to --help, not the 90 lines of flags.
    EXPECT_EQ(log.find("flags:"), std::string::npos) << log;
    EXPECT_NE(log.find("see --help"), std::string::npos) << log;
  }
}

TEST(LoraFinetune, TheFirstStepsThroughputIsMeasuredOverTheStepAndALoneValidationPointShows) {
  const fs::path base = fixtures() / "tiny_llama";
  ASSERT_TRUE(fs::exists(base / "config.json"));
  TempDir dir;
  ASSERT_EQ(finetune("--base " + base.string() + " --data " + write_task(dir) + " --steps 8 --warmup 1 --batch 2 "
                     "--seq 32 --eval-every 0 --sample-tokens 0 --threads 1 --log-every 1 --out " + (dir / "o"), dir), 0);
  const auto rows = losses(dir / "o/log.csv");
  ASSERT_GE(rows.size(), 8u);
  // Before, the clock started after the first step: its tokens/s came out thousands of times too high.
  EXPECT_LT(rows[0].tok_s, 10 * rows[7].tok_s);
  EXPECT_GT(rows[0].tok_s, 0);
  // The one validation (at the end) is a marker in the SVG: a line of one point would not show.
  const std::string svg = read(dir / "o/loss.svg");
  size_t circles = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++circles;
  EXPECT_EQ(circles, 1u);
}

}  // namespace

namespace {

// tiny_llama's tokenizer (601 ids) with a model of `rows` embedding rows.
fs::path folder_with_rows(const TempDir& dir, int64_t rows) {
  const fs::path out = dir / ("rows" + std::to_string(rows));
  tg::nn::LlamaForCausalLM model({.vocab_size = rows, .hidden_size = 32, .intermediate_size = 64, .num_hidden_layers = 1,
                                  .num_attention_heads = 4, .num_key_value_heads = 2, .max_position_embeddings = 128});
  tg::nn::save_pretrained(model, out.string());
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(fixtures() / "tiny_llama" / name, out / name);
  return out;
}

}  // namespace

// Before, the first step failed with an embedding index error that named no tokenizer.
TEST(LoraFinetune, ATokenizerWithIdsBeyondTheEmbeddingIsAnErrorBeforeAnyWork) {
  TempDir dir;
  std::string log;
  const std::string args = "--base " + folder_with_rows(dir, 500).string() + " --data " + write_task(dir) +
                           " --steps 2 --out " + (dir / "o");
  EXPECT_EQ(finetune(args, dir, &log), 1);
  for (const char* part : {"the tokenizer has 601 ids", "the model's embedding 500 rows", "resize_token_embeddings"})
    EXPECT_NE(log.find(part), std::string::npos) << log;
  EXPECT_EQ(log.find("base: "), std::string::npos) << "the model was loaded first:\n" << log;
}

// A model with more rows than its tokenizer (Qwen, Llama-3) trains; the adapter is written before
// the final sample, which decodes the ids the tokenizer lacks as unknown instead of failing.
TEST(LoraFinetune, ATokenizerSmallerThanTheEmbeddingTrainsAndTheAdapterIsWrittenFirst) {
  TempDir dir;
  std::string log;
  const std::string args = "--base " + folder_with_rows(dir, 700).string() + " --data " + write_task(dir) +
                           " --steps 2 --warmup 1 --batch 2 --seq 32 --sample-tokens 8 --threads 1 --out " + (dir / "o");
  ASSERT_EQ(finetune(args, dir, &log), 0) << log;
  EXPECT_TRUE(fs::exists(dir / "o/adapter/adapter_model.safetensors"));
  const size_t adapter = log.find("adapter: "), sample = log.rfind("sample (greedy)");
  ASSERT_NE(adapter, std::string::npos) << log;
  ASSERT_NE(sample, std::string::npos) << log;
  EXPECT_LT(adapter, sample) << log;
}

TEST(LoraFinetune, FilesAndFlagsAreCheckedBeforeTheModelLoads) {
  const fs::path base = fixtures() / "tiny_llama";
  TempDir dir;
  std::string log;
  const std::string b = "--base " + base.string() + " --steps 2 --out " + (dir / "o") + " ";
  auto refused = [&](const std::string& args, std::vector<std::string> parts) {
    EXPECT_EQ(finetune(args, dir, &log), 2) << args << "\n" << log;
    for (const auto& p : parts) EXPECT_NE(log.find(p), std::string::npos) << args << "\n" << log;
    EXPECT_EQ(log.find("base: "), std::string::npos) << "the model was loaded first:\n" << log;
  };
  refused(b + "--data " + (dir / "missing.jsonl"), {"--data '" + (dir / "missing.jsonl") + "' does not exist"});
  refused(b, {"--data is needed with a Hugging Face base"});
  write(dir / "a.json", "[{\"text\": \"x\"}]");
  refused(b + "--data " + (dir / "a.json"), {"is a .json file", "reads .jsonl", "jq -c"});
  write(dir / "a.csv", "text\nx\n");
  refused(b + "--data " + (dir / "a.csv"), {"is a csv file, which would be read as plain text", ".bin"});
  const std::string data = write_task(dir, 12);
  refused(b + "--data " + data + " --val " + (dir / "a.csv"), {"--val '"});
  // A Hugging Face user's mistyped folder is not told to run the toy example.
  refused("--base " + (dir / "TinyLlama") + " --data " + data, {"--base '" + (dir / "TinyLlama") + "' does not exist",
                                                                 "a Hugging Face model folder"});
  EXPECT_EQ(log.find("toy_transformer first"), std::string::npos) << log;
  EXPECT_EQ(log.find("examples/toy_transformer"), std::string::npos) << log;
  refused(b + "--data " + data + " --alpha inf", {"--alpha wants a finite number, got 'inf'"});
  refused(b + "--data " + data + " --clip nan", {"--clip wants a finite number in [0, inf), got 'nan'"});
  refused(b + "--data " + data + " --nproc 4294967297", {"--nproc wants an integer in [1, 1024], got '4294967297'"});
  refused(b + "--data " + data + " --eval-batches 4294967297", {"--eval-batches wants an integer in [0, 2147483647]"});
  refused(b + "--data " + data + " --threads 4294967297", {"--threads wants an integer in [0, 4096], got '4294967297'"});
  refused(b + "--data " + data + " --batch 1099511627776", {"--batch wants an integer in [1, 1048576]"});
  refused(b + "--data " + data + " --grad-accum 1099511627776", {"--grad-accum wants an integer in [1, 1048576]"});
  refused(b + "--data " + data + " --resume", {"--resume: no checkpoint in --out", "--resume <its out>/checkpoint-<step>"});
  refused(b + "--data " + data + " --resume " + (dir / "nowhere"), {"is not a checkpoint folder"});
  refused(b + "--data " + data + " --warmup 2", {"--warmup 2 is not below --steps 2", "peak learning rate"});
  refused(b + "--data " + data + " --lr-scheduler cosine_with_restarts", {"--lr-scheduler wants linear, cosine"});
  refused(b + "--data " + data + " --save-gguf q4_k", {"--save-gguf wants f32, f16, bf16 or q8_0, got 'q4_k'"});
  refused(b + "--data " + data + " --save-gguf f16 --load-in-4bit", {"no GGUF of a 4-bit base", "export_gguf"});
  refused(b + "--data " + data + " --save-gguf f16 --load-in-fp8", {"no GGUF of an FP8 base", "export_gguf"});
  refused(b + "--data " + data + " --load-in-4bit --load-in-fp8", {"--load-in-4bit and --load-in-fp8", "pick one"});
  refused(b + "--data " + data + " --full --load-in-fp8", {"FP8 weights cannot train", "drop --load-in-fp8"});
  EXPECT_EQ(log.find("error: stoll"), std::string::npos) << log;
}

// --save-gguf: the merged model and the adapter as llama.cpp's files, and the commands that run them.
TEST(LoraFinetune, SaveGgufWritesTheMergedModelAndTheAdapterAndSaysHowToRunThem) {
  const fs::path base = fixtures() / "tiny_llama";
  TempDir dir;
  std::string log;
  const std::string out = dir / "o";
  ASSERT_EQ(finetune("--base " + base.string() + " --data " + write_task(dir, 40) + " --steps 2 --warmup 1 --seq 32 --batch 2 "
                         "--eval-every 0 --sample-tokens 0 --merge true --save-gguf f32 --out " + out, dir, &log), 0) << log;
  const tg::gguf::Reader model(out + "/model.gguf"), adapter(out + "/adapter.gguf");
  EXPECT_EQ(model.header().metadata.at("general.architecture").as_string("a"), "llama");
  EXPECT_EQ(adapter.header().metadata.at("general.type").as_string("t"), "adapter");
  // The file holds the merged weights (v_proj: no RoPE reordering), not the base's.
  auto merged = tg::nn::from_pretrained(out + "/merged");
  const std::vector<float> v = merged->get_parameter("model.layers.0.self_attn.v_proj.weight").to_vector<float>();
  EXPECT_EQ(model.floats(model.tensor("blk.0.attn_v.weight")), v);
  auto original = tg::nn::from_pretrained(base.string());
  EXPECT_NE(original->get_parameter("model.layers.0.self_attn.v_proj.weight").to_vector<float>(), v);
  for (const std::string line : {"llama-cli -m " + out + "/model.gguf", "FROM " + out + "/model.gguf",
                                 "llama-cli -m base.gguf --lora " + out + "/adapter.gguf",
                                 "from_pretrained(\"" + out + "/merged\")", "vllm serve " + out + "/merged"})
    EXPECT_NE(log.find(line), std::string::npos) << line << "\n" << log;
}

// LoRA on experts' weights has no llama.cpp adapter form: --save-gguf says so before training,
// writes the merged model and the peft adapter, and no adapter.gguf.
TEST(LoraFinetune, SaveGgufOfExpertAdaptersWritesTheMergedModelOnly) {
  TempDir dir;
  const fs::path base = dir / "mixtral";
  tg::json::Value config = tg::json::parse(read(std::string(TG_TESTS_DIR) + "/fixtures/hf/mixtral/config.json"));
  config.set("vocab_size", 601);  // tiny_llama's tokenizer
  tg::Generator gen(0);
  tg::nn::save_pretrained(*tg::nn::parse_pretrained_config(tg::json::dump(config)).build(gen), base.string());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(fixtures() / "tiny_llama" / f, base / f);
  std::string log;
  const std::string out = dir / "o";
  ASSERT_EQ(finetune("--base " + base.string() + " --data " + write_task(dir, 40) + " --steps 2 --warmup 1 --seq 32 "
                         "--batch 2 --eval-every 0 --sample-tokens 0 --target-parameters mlp.experts.down_proj "
                         "--save-gguf f16 --out " + out, dir, &log), 0) << log;
  EXPECT_NE(log.find("model.gguf (LoRA merged) will be written, no adapter.gguf"), std::string::npos) << log;
  EXPECT_EQ(tg::gguf::Reader(out + "/model.gguf").header().metadata.at("llama.expert_count").as_int("n"), 6);
  EXPECT_TRUE(fs::exists(out + "/adapter/adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/adapter.gguf"));
  EXPECT_EQ(log.find("llama-cli -m base.gguf --lora"), std::string::npos) << log;
}

// Before, an id beyond the embedding failed at the step that met it, naming no file.
TEST(LoraFinetune, ATokenFileWithIdsBeyondTheEmbeddingIsRefusedBeforeTraining) {
  TempDir dir;
  std::vector<int32_t> ids(4000, 5);
  ids[3000] = 1000;  // tiny_llama has 601 rows
  tg::data::write_token_file(dir / "t.bin", ids);
  std::string log;
  EXPECT_EQ(finetune("--base " + (fixtures() / "tiny_llama").string() + " --data " + (dir / "t.bin") + " --steps 2 --out " +
                         (dir / "o"),
                     dir, &log),
            2);
  EXPECT_NE(log.find("--data '" + (dir / "t.bin") + "' holds token id 1000, outside the model's embedding of 601 rows"),
            std::string::npos)
      << log;
  EXPECT_FALSE(fs::exists(dir / "o/log.csv"));
}

// Conversations pack as Layout::PackSeparate unless --layout says otherwise: each conversation
// attends only to itself, and the training and validation losses are finite.
TEST(LoraFinetune, ChatDataPacksEachConversationSeparatelyByDefault) {
  TempDir dir;
  const fs::path base = dir / "base";
  fs::create_directories(base);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(fixtures() / "tiny_llama" / f, base / f);
  write(base / "tokenizer_config.json",
        R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",)"
        R"( "chat_template": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }})"
        R"({{ eos_token }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}"})");
  std::string chat;
  const char* names[] = {"alice", "bob", "carol", "dave", "erin"};
  for (int i = 0; i < 60; ++i)
    chat += std::string(R"({"messages": [{"role": "user", "content": "what does )") + names[i % 5] +
            R"( like?"}, {"role": "assistant", "content": ")" + names[i % 5] + " likes " +
            std::string(i % 3 ? "tea" : "long walks by the river in the evening") + R"(."}]})" + "\n";
  write(dir / "chat.jsonl", chat);
  const std::string args = "--base " + base.string() + " --data " + (dir / "chat.jsonl") +
                           " --steps 3 --batch 2 --seq 64 --threads 2 --eval-every 3 --sample-tokens 0 --out ";
  for (const char* layout : {"", "pack"}) {
    SCOPED_TRACE(*layout ? layout : "auto");
    std::string log;
    const std::string out = dir / (std::string("out-") + layout);
    ASSERT_EQ(finetune(args + out + (*layout ? std::string(" --layout ") + layout : std::string()), dir, &log), 0) << log;
    EXPECT_NE(log.find(std::string("tokens (") + (*layout ? layout : "pack-separate") + ")"), std::string::npos) << log;
    for (const LossRow& r : losses(out + "/loss.csv")) EXPECT_TRUE(std::isfinite(r.loss)) << r.split << " " << r.step;
  }
  std::string log;
  EXPECT_EQ(finetune(args + (dir / "o") + " --layout packed", dir, &log), 2);
  EXPECT_NE(log.find("--layout wants auto, pack, pad or pack-separate, got 'packed'"), std::string::npos) << log;
}

