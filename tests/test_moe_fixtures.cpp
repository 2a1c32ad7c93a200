// The mixture-of-experts families against transformers 5 + peft: the folders, adapters and numbers
// tests/fixtures/hf/make_moe_fixtures.py writes on a machine with them (the GPU machine; the files
// are committed from there). A family whose files are missing fails, naming them and the command that
// writes them; tests/test_moe.cpp checks the same computations against float64 loops written from
// the modeling files.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "io/safetensors.h"
#include "nn/generation/generation.h"
#include "nn/models/pretrained.h"
#include "nn/nn.h"
#include "ops/cast.h"
#include "ops/shape.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "tests/test_support.h"

namespace tg::test {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(TG_TESTS_DIR) / "fixtures" / "hf";

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : to(t, kFloat32).to_vector<float>()) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

std::set<std::string> keys_of(const fs::path& folder) {
  std::set<std::string> keys;
  for (const auto& [k, t] : safetensors::load_file((folder / "model.safetensors").string())) keys.insert(k);
  return keys;
}

void expect_moe_fixture_matches(const std::string& name, Device device = Device::cpu()) {
  SCOPED_TRACE(name);
  for (const std::string& file : {name + "_expected.safetensors", name + "/model.safetensors",
                                  name + "_fused/model.safetensors", name + "_adapter/adapter_model.safetensors"})
    ASSERT_TRUE(fs::exists(kFixtures / file))
        << "missing fixture tests/fixtures/hf/" << file << ": write it with `python3 tests/fixtures/hf/make_moe_fixtures.py "
        << name << "` (transformers 5 and peft; on the GPU machine: scripts/gpu/check.sh moe) and commit "
        << "tests/fixtures/hf/" << name << "{,_fused,_adapter,_expected.safetensors}";
  safetensors::TensorMap want = safetensors::load_file((kFixtures / (name + "_expected.safetensors")).string());
  auto model = std::dynamic_pointer_cast<nn::DecoderForCausalLM>(
      nn::from_pretrained((kFixtures / name).string(), {.device = device}));
  ASSERT_TRUE(model);
  auto cpu = [](const Tensor& t) { return to(t, Device::cpu()); };
  const Tensor ids = to(want.at("ids"), device), labels = to(want.at("labels"), device);
  const Tensor logits = model->forward(ids);
  EXPECT_TENSOR_NEAR(cpu(logits), want.at("logits"), 1e-5, 1e-5 * max_abs(want.at("logits")));
  // transformers' own fused names load to the same model
  EXPECT_TENSOR_EQ(cpu(nn::from_pretrained((kFixtures / (name + "_fused")).string(), {.device = device})->forward(ids)),
                   cpu(logits));
  EXPECT_TENSOR_NEAR(cpu(model->loss(ids, labels)), want.at("loss"), 1e-5, 0.0);  // with router_aux_loss_coef * aux
  EXPECT_TENSOR_NEAR(cpu(model->load_balancing_loss()), want.at("aux_loss"), 1e-5, 0.0);
  // greedy decoding through the KV cache (sinks, windows, one token's experts)
  const std::vector<int64_t> greedy = want.at("greedy").to_vector<int64_t>();
  const std::vector<int32_t> prompt(greedy.begin(), greedy.begin() + 5);
  const auto got = nn::generate(*model, {prompt}, {.max_new_tokens = 6});
  EXPECT_EQ(std::vector<int64_t>(got[0].begin(), got[0].end()), greedy);
  // save_pretrained writes the tensors transformers writes
  TempDir dir;
  nn::save_pretrained(*model, dir / "m");
  EXPECT_EQ(keys_of(dir / "m"), keys_of(kFixtures / name));

  peft::load_adapter(*model, (kFixtures / (name + "_adapter")).string());
  EXPECT_TENSOR_NEAR(cpu(model->forward(ids)), want.at("lora_logits"), 1e-5, 1e-5 * max_abs(want.at("lora_logits")));
  Tensor loss = model->loss(ids, labels);
  EXPECT_TENSOR_NEAR(cpu(loss), want.at("lora_loss"), 1e-5, 0.0);
  EXPECT_TENSOR_NEAR(cpu(model->load_balancing_loss()), want.at("lora_aux_loss"), 1e-5, 0.0);
  loss.backward();
  size_t grads = 0;
  auto expect_grad = [&](const std::string& key, const Tensor& w) {
    const Tensor& g = want.at("grad.base_model.model." + key);
    EXPECT_TENSOR_NEAR(cpu(w.grad()), g, 1e-4, 1e-4 * max_abs(g)) << key;
    ++grads;
  };
  for (auto& [path, l] : peft::lora_layers(*model)) {
    expect_grad(path + ".lora_A.weight", l->lora_A->weight);
    expect_grad(path + ".lora_B.weight", l->lora_B->weight);
  }
  for (auto& [path, l] : peft::lora_experts(*model))
    for (size_t i = 0; i < l->parameters.size(); ++i) {
      const auto& a = l->adapters.at(l->parameters[i]);
      expect_grad(path + peft::peft_infix(l->parameters, i) + ".lora_A.weight", a->lora_A->weight);
      expect_grad(path + peft::peft_infix(l->parameters, i) + ".lora_B.weight", a->lora_B->weight);
    }
  size_t expected = 0;
  for (const auto& [k, t] : want) expected += k.starts_with("grad.");
  EXPECT_EQ(grads, expected);
}

TEST(HfFixtures, Qwen3MoeMatchesTransformersAndPeft) { expect_moe_fixture_matches("qwen3_moe"); }
TEST(HfFixtures, MixtralMatchesTransformersAndPeft) { expect_moe_fixture_matches("mixtral"); }
// Its fixture's swiglu_limit (1.5) is not the 7.0 transformers clamps at whatever config.json says.
TEST(HfFixtures, GptOssMatchesTransformersAndPeft) { expect_moe_fixture_matches("gpt_oss"); }

// The same on the GPU (float32): grouped_mm's cuBLAS GEMMs, the CUDA routing, sinks and windows.
TEST(HfFixtures, MoeFamiliesMatchTransformersAndPeftOnCuda) {
  TG_REQUIRE_CUDA();
  for (const std::string& name : {"qwen3_moe", "mixtral", "gpt_oss"}) expect_moe_fixture_matches(name, Device::cuda());
}

}  // namespace
}  // namespace tg::test
