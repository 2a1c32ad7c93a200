// QLoRA on the mixture-of-experts families: the experts' weights (the bulk of such a model) in
// 4 bits, each expert quantised on its own and dequantised one at a time by grouped_mm_4bit; from a
// folder in either layout (and gpt-oss's MXFP4) as the weights stream in, bitwise what
// replace_with_4bit_linear makes of the model loaded dense; LoRA on the experts over the 4-bit base
// as over its dequantised twin; merge_and_unload back to a dense model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/autograd.h"
#include "core/factory.h"
#include "io/safetensors.h"
#include "nn/models/gguf.h"
#include "nn/models/moe_lm.h"
#include "nn/models/pretrained.h"
#include "nn/models/quantization.h"
#include "nn/moe.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/example_runs.h"
#include "tests/test_moe_models.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

const nn::QuantizationConfig k4bit{.load_in_4bit = true, .double_quant = true, .compute_dtype = kFloat32};

std::vector<nn::MoeExperts*> experts_of(nn::Module& model) {
  std::vector<nn::MoeExperts*> out;
  for (auto& [path, m] : model.named_modules())
    if (auto* e = dynamic_cast<nn::MoeExperts*>(m)) out.push_back(e);
  return out;
}

// The model with every expert weight replaced by the dequantised 4-bit one (dense, frozen).
std::shared_ptr<nn::MoeForCausalLM> dequantised_twin(const std::string& dir) {
  auto twin = std::dynamic_pointer_cast<nn::MoeForCausalLM>(nn::from_pretrained(dir));
  nn::replace_with_4bit_linear(*twin, k4bit);
  for (nn::MoeExperts* e : experts_of(*twin)) e->dequantize();
  return twin;
}

// Loading with load_in_4bit quantises every expert weight as its parts arrive (the hub's
// per-expert tensors, or transformers' fused ones), and gives what replace_with_4bit_linear gives
// on the model loaded dense, bitwise; no dense expert weight is left.
TEST(MoeQlora, LoadIn4bitQuantisesTheExpertsAsReplaceWith4bitLinearDoes) {
  for (const std::string& arch : kMoeArchitectures)
    for (const bool fused : {false, true}) {
      SCOPED_TRACE(arch + (fused ? " fused" : " hub layout"));
      Generator gen(11);
      nn::MoeForCausalLM model(tiny_moe(arch), gen);
      TempDir dir;
      nn::save_pretrained(model, dir / "m");
      if (fused) safetensors::save_file(model.state_dict(), dir / "m/model.safetensors", {{"format", "pt"}});
      auto loaded = nn::from_pretrained(dir / "m", {.quantization = k4bit});
      auto replaced = nn::from_pretrained(dir / "m");
      const std::vector<std::string> paths = nn::replace_with_4bit_linear(*replaced, k4bit);
      const std::vector<nn::MoeExperts*> blocks = experts_of(*loaded);
      ASSERT_EQ(blocks.size(), arch == "Qwen3MoeForCausalLM" ? 1u : 2u);  // Qwen3's second layer is dense
      EXPECT_EQ(std::count_if(paths.begin(), paths.end(), [](const std::string& p) { return p.ends_with("gate_up_proj"); }),
                static_cast<int64_t>(blocks.size()));
      for (nn::MoeExperts* e : blocks) {
        EXPECT_FALSE(e->gate_up_proj.defined() || e->down_proj.defined());
        ASSERT_TRUE(e->gate_up_proj_4bit && e->down_proj_4bit);
        EXPECT_EQ(e->gate_up_proj_4bit->experts.size(), 4u);
        EXPECT_EQ(e->weight_shape("down_proj"),
                  dynamic_cast<nn::MoeExperts&>(*model.get_submodule("model.layers.0.mlp.experts")).weight("down_proj").shape());
      }
      for (const auto& [name, t] : loaded->named_parameters())
        EXPECT_FALSE(name.ends_with("experts.gate_up_proj") || name.ends_with("experts.down_proj"))
            << name << " is still a dense parameter";
      const Tensor ids = randint(0, 64, {2, 6}, gen);
      const Tensor logits = loaded->forward(ids);
      EXPECT_TENSOR_EQ(logits, replaced->forward(ids));
      // each expert's weight is the dense one up to NF4's rounding (its RMS error on N(0, s) values
      // is about a tenth of s), in the same place and layout
      for (const std::string p : {"gate_up_proj", "down_proj"}) {
        const auto& block = dynamic_cast<nn::MoeExperts&>(*model.get_submodule("model.layers.0.mlp.experts"));
        const std::vector<float> want = contiguous(block.weight(p)).to_vector<float>();
        const std::vector<float> got = contiguous(blocks[0]->weight(p)).to_vector<float>();
        ASSERT_EQ(got.size(), want.size());
        double err = 0, norm = 0;
        for (size_t i = 0; i < want.size(); ++i) err += (got[i] - want[i]) * (got[i] - want[i]), norm += want[i] * want[i];
        EXPECT_GT(err, 0.0) << p;
        EXPECT_LT(std::sqrt(err / norm), 0.15) << p;
      }
    }
}

// LoRA on 4-bit experts (peft's target_parameters) computes what it computes over the dequantised
// experts held dense: logits, loss and every LoRA gradient; merge_and_unload gives a dense model
// with the merged weights.
TEST(MoeQlora, ExpertLoraOverA4bitBaseMatchesItsDequantisedTwin) {
  for (const std::string& arch : kMoeArchitectures) {
    SCOPED_TRACE(arch);
    Generator gen(12);
    nn::MoeForCausalLM model(tiny_moe(arch), gen);
    TempDir dir;
    nn::save_pretrained(model, dir / "m");
    auto quantised = nn::from_pretrained(dir / "m", {.quantization = k4bit});
    auto twin = dequantised_twin(dir / "m");
    const peft::LoraConfig lora{.r = 2, .lora_alpha = 4, .target_modules = {"q_proj"},
                                .target_parameters = kExpertTargets};
    Generator init_a(5), init_b(5);
    peft::apply_lora(*quantised, lora, init_a);
    peft::apply_lora(*twin, lora, init_b);
    for (nn::Module* m : std::vector<nn::Module*>{quantised.get(), twin.get()}) {
      Generator noise(6);  // lora_B nonzero, as after some training
      randomise_lora(*m, noise);
    }
    EXPECT_EQ(peft::trainable_parameters_line(*quantised), peft::trainable_parameters_line(*twin))
        << "the 4-bit experts count as the weights they hold";
    const Tensor ids = randint(0, 64, {2, 6}, gen);
    const Tensor a = quantised->forward(ids), b = twin->forward(ids);
    EXPECT_TENSOR_NEAR(a, b, 1e-5, 1e-5);
    sum(a).backward();
    sum(b).backward();
    const auto ga = quantised->named_trainable_parameters(), gb = twin->named_trainable_parameters();
    ASSERT_EQ(ga.size(), gb.size());
    for (size_t i = 0; i < ga.size(); ++i) {
      ASSERT_EQ(ga[i].first, gb[i].first);
      ASSERT_TRUE(ga[i].second.grad().defined()) << ga[i].first;
      EXPECT_TENSOR_NEAR(ga[i].second.grad(), gb[i].second.grad(), 1e-4, 1e-5) << ga[i].first;
    }
    {
      NoGradGuard g;
      peft::merge_and_unload(*quantised);
    }
    for (nn::MoeExperts* e : experts_of(*quantised)) {
      EXPECT_FALSE(e->quantized());
      EXPECT_TRUE(e->gate_up_proj.defined() && !e->gate_up_proj.requires_grad());
    }
    EXPECT_TENSOR_NEAR(quantised->forward(ids), a, 1e-4, 1e-4);
  }
}

// gpt-oss's MXFP4 experts with load_in_4bit: dequantised as they arrive, then held in 4 bits (NF4).
TEST(MoeQlora, GptOssMxfp4ExpertsLoadIn4bit) {
  nn::MoeConfig c = tiny_moe("GptOssForCausalLM");
  c.base.hidden_size = 32;  // whole MXFP4 blocks of 32 along the input dims
  c.base.intermediate_size = 32;
  Generator gen(13);
  nn::MoeForCausalLM model(c, gen);
  TempDir dir;
  nn::save_pretrained(model, dir / "m");
  write_mxfp4_experts(dir / "m", model);
  auto loaded = nn::from_pretrained(dir / "m", {.quantization = k4bit});
  auto replaced = nn::from_pretrained(dir / "m");
  nn::replace_with_4bit_linear(*replaced, k4bit);
  for (nn::MoeExperts* e : experts_of(*loaded)) EXPECT_TRUE(e->gate_up_proj_4bit && e->down_proj_4bit);
  const Tensor ids = randint(0, 64, {2, 6}, gen);
  EXPECT_TENSOR_EQ(loaded->forward(ids), replaced->forward(ids));
}

// Quantised after apply_lora, or twice: refused naming the block.
TEST(MoeQlora, QuantisingAnAdaptedOrQuantisedBlockIsRefused) {
  Generator gen(14);
  auto model = std::make_shared<nn::MoeForCausalLM>(tiny_moe("MixtralForCausalLM"), gen);
  nn::replace_with_4bit_linear(*model, k4bit);
  EXPECT_ERROR_HAS(nn::experts_4bit_targets(*model, k4bit, "replace_with_4bit_linear"), "model.layers.0.mlp.experts",
                   "in 4 bits already");
  auto adapted = std::make_shared<nn::MoeForCausalLM>(tiny_moe("MixtralForCausalLM"), gen);
  peft::apply_lora(*adapted, {.r = 2, .target_modules = {"q_proj"}, .target_parameters = kExpertTargets}, gen);
  EXPECT_ERROR_HAS(nn::experts_4bit_targets(*adapted, k4bit, "replace_with_4bit_linear"), "is a LoRAExperts",
                   "before apply_lora");
}

// A NaN in a folder's expert weight is refused while it streams in, naming the folder, the model's
// weight (the hub's per-expert tensors fill it) and the expert.
TEST(MoeQlora, ANanInAnExpertWeightIsNamedWhileLoading) {
  Generator gen(17);
  nn::MoeForCausalLM model(tiny_moe("MixtralForCausalLM"), gen);
  TempDir dir;
  nn::save_pretrained(model, dir / "m");
  safetensors::TensorMap files = safetensors::load_file(dir / "m/model.safetensors");
  const char* key = "model.layers.1.block_sparse_moe.experts.2.w1.weight";
  Tensor w = contiguous(files.at(key));
  w.data_ptr<float>()[5] = std::nanf("");
  files[key] = w;
  safetensors::save_file(files, dir / "m/model.safetensors", {{"format", "pt"}});
  EXPECT_ERROR_HAS(nn::from_pretrained(dir / "m", {.quantization = k4bit}), "from_pretrained",
                   "'model.layers.1.mlp.experts.gate_up_proj' (as read from the folder)", "expert 2", "holds nan");
}

// A 4-bit experts block has no place in bitsandbytes' layout nor in a GGUF: refused by name, not
// written without its experts.
TEST(MoeQlora, SavingA4bitMixtureIsRefusedNamingTheExperts) {
  Generator gen(15);
  auto model = std::make_shared<nn::MoeForCausalLM>(tiny_moe("MixtralForCausalLM"), gen);
  nn::replace_with_4bit_linear(*model, k4bit);
  TempDir dir;
  EXPECT_ERROR_HAS(nn::save_pretrained(*model, dir / "m"), "'model.layers.0.mlp.experts' holds its experts in 4 bits",
                   "merge_and_unload");
  EXPECT_FALSE(std::filesystem::exists(dir / "m/model.safetensors"));
  EXPECT_ERROR_HAS(nn::gguf_model(*model), "save_gguf", "holds its experts in 4 bits");
}

// From the command line: lora_finetune --load-in-4bit on a mixture's folder holds its experts in
// 4 bits, trains LoRA on them (--target-parameters) with the loss falling, writes peft's adapter,
// and --merge writes a dense folder that loads.
TEST(MoeQlora, LoraFinetuneLoadIn4bitTrainsTheExpertsAndMerges) {
  TempDir dir;
  nn::MoeConfig c = tiny_moe("MixtralForCausalLM");
  c.base.vocab_size = 601;  // tiny_llama's tokenizer
  c.base.max_position_embeddings = 64;
  Generator gen(16);
  nn::MoeForCausalLM model(c, gen);
  const std::string base = dir / "mixtral";
  nn::save_pretrained(model, base);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(fixtures() / "tiny_llama" / f, std::filesystem::path(base) / f);
  std::string log;
  ASSERT_EQ(finetune("--base " + base + " --data " + write_task(dir) + " --steps 12 --warmup 1 --batch 2 --seq 32 "
                     "--eval-every 0 --sample-tokens 0 --threads 2 --lr 3e-3 --log-every 1 --load-in-4bit true "
                     "--target-parameters mlp.experts.gate_up_proj,mlp.experts.down_proj --merge true --out " +
                         (dir / "o"), dir, &log), 0) << log;
  const std::vector<double> losses = train_losses(dir / "o/log.csv");
  ASSERT_EQ(losses.size(), 12u) << log;
  EXPECT_GT(loss_drop(losses), 0.0) << log;
  EXPECT_NE(read(dir / "o/adapter/adapter_config.json").find("mlp.experts.gate_up_proj"), std::string::npos);
  auto merged = nn::from_pretrained(dir / "o/merged");
  const std::vector<nn::MoeExperts*> blocks = experts_of(*merged);
  ASSERT_EQ(blocks.size(), 2u);
  for (nn::MoeExperts* e : blocks) EXPECT_TRUE(!e->quantized() && e->gate_up_proj.defined());
}

}  // namespace
}  // namespace tg::test
