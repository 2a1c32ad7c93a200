// The preference losses against PyTorch: tests/fixtures/preference/make_preference_fixtures.py
// computes them from TRL's definitions with transformers + peft on the tiny Llama fixture and its
// adapter (on a machine with them: the GPU machine); here the same batch through tapegrad's fused
// log-probs, reference pass and losses must give its per-token log-probs, losses and every LoRA
// gradient, on the CPU and on the GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <numeric>

#include "core/autograd.h"
#include "core/factory.h"
#include "io/safetensors.h"
#include "nn/models/pretrained.h"
#include "ops/cast.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "peft/lora.h"
#include "testing/testing.h"
#include "train/detail/preference_step.h"
#include "train/preference_losses.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(TG_TESTS_DIR) / "fixtures";

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : to(t, kFloat64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

void expect_preference_fixture_matches(Device device) {
  const safetensors::TensorMap want =
      safetensors::load_file((kFixtures / "preference" / "expected.safetensors").string());
  auto model = nn::from_pretrained((kFixtures / "hf" / "llama").string(), {.device = device});
  peft::load_adapter(*model, (kFixtures / "hf" / "llama_adapter").string());
  auto cpu = [](const Tensor& t) { return to(t, Device::cpu()); };
  const Tensor ids = to(want.at("ids"), device), labels = to(want.at("labels"), device);
  const int64_t B = ids.size(0) / 2;
  EXPECT_TENSOR_NEAR(cpu(model->token_log_probs(ids, labels)), want.at("policy_logps"), 1e-5, 1e-5);
  Tensor ref_tok, ref_tok_t;
  {
    NoGradGuard g;
    peft::AdapterDisabled off(*model);
    ref_tok = model->token_log_probs(ids, labels);
    ref_tok_t = model->token_log_probs(ids, labels, Tensor(), 0.8);
  }
  EXPECT_TENSOR_NEAR(cpu(ref_tok), want.at("reference_logps"), 1e-5, 1e-5);
  const Tensor ref = sum(ref_tok, {1});
  std::vector<int64_t> tokens;
  const Tensor mask = [&] {
    std::vector<float> m(static_cast<size_t>(ids.numel()), 0.0f);
    const std::vector<int64_t> l = want.at("labels").to_vector<int64_t>();
    const int64_t T = ids.size(1);
    for (int64_t r = 0; r < ids.size(0); ++r) {
      int64_t n = 0;
      for (int64_t t = 0; t + 1 < T; ++t) n += (m[static_cast<size_t>(r * T + t)] = l[static_cast<size_t>(r * T + t + 1)] != -100);
      tokens.push_back(n);
    }
    return to(from_vector(m, ids.shape()), device);
  }();
  const std::vector<int64_t> ct(tokens.begin(), tokens.begin() + B), rt(tokens.begin() + B, tokens.end());
  const std::vector<float> adv_f = want.at("grpo.advantages").to_vector<float>();
  const std::vector<double> adv(adv_f.begin(), adv_f.end());
  using Loss = std::function<train::PreferenceLoss(const Tensor& seq, const Tensor& tok)>;
  auto pairs = [&](const Tensor& seq, bool reference) {
    train::PairLogProbs p{slice(seq, 0, 0, B), slice(seq, 0, B, 2 * B), {}, {}, ct, rt};
    if (reference) p.ref_chosen = slice(ref, 0, 0, B), p.ref_rejected = slice(ref, 0, B, 2 * B);
    return p;
  };
  auto grpo = [&](train::GRPOConfig c) {
    return [&, c](const Tensor&, const Tensor& tok) {
      return train::grpo_loss(c, {tok, to(want.at("grpo.old_logps"), device), ref_tok_t, mask, adv, tokens,
                                  std::accumulate(tokens.begin(), tokens.end(), int64_t{0})});
    };
  };
  const std::vector<std::pair<std::string, Loss>> losses = {
      {"dpo_sigmoid", [&](const Tensor& s, const Tensor&) { return train::dpo_loss({.beta = 0.1}, pairs(s, true)); }},
      {"dpo_sigmoid_smoothed",
       [&](const Tensor& s, const Tensor&) { return train::dpo_loss({.beta = 0.5, .label_smoothing = 0.1}, pairs(s, true)); }},
      {"dpo_hinge",
       [&](const Tensor& s, const Tensor&) { return train::dpo_loss({.beta = 0.3, .loss_type = {"hinge"}}, pairs(s, true)); }},
      {"dpo_ipo",
       [&](const Tensor& s, const Tensor&) { return train::dpo_loss({.beta = 0.2, .loss_type = {"ipo"}}, pairs(s, true)); }},
      {"dpo_robust",
       [&](const Tensor& s, const Tensor&) {
         return train::dpo_loss({.loss_type = {"robust"}, .label_smoothing = 0.2}, pairs(s, true));
       }},
      {"cpo_sigmoid", [&](const Tensor& s, const Tensor&) { return train::cpo_loss({}, pairs(s, false)); }},
      {"simpo",
       [&](const Tensor& s, const Tensor&) {
         return train::cpo_loss({.beta = 2.0, .loss_type = "simpo", .cpo_alpha = 0}, pairs(s, false));
       }},
      {"orpo", [&](const Tensor& s, const Tensor&) { return train::orpo_loss({.beta = 0.25}, pairs(s, false)); }},
      {"kto",
       [&](const Tensor& s, const Tensor&) {
         std::vector<bool> desirable(static_cast<size_t>(B), true);
         desirable.resize(static_cast<size_t>(2 * B), false);
         return train::kto_loss({.beta = 0.5}, {s, ref, desirable, 0.3});
       }},
      {"grpo_grpo", grpo({.beta = 0.04, .epsilon = 0.02, .loss_type = "grpo"})},
      {"grpo_dapo", grpo({.beta = 0.04, .epsilon = 0.02, .epsilon_high = 0.03})},
  };
  for (const auto& [name, loss_of] : losses) {
    SCOPED_TRACE(name);
    model->zero_grad();
    const double temperature = name.starts_with("grpo") ? 0.8 : 1.0;
    const Tensor tok = model->token_log_probs(ids, labels, Tensor(), temperature);
    const train::PreferenceLoss l = loss_of(sum(tok, {1}), tok);
    EXPECT_TENSOR_NEAR(cpu(l.loss), want.at("loss." + name), 1e-5, 1e-6);
    l.loss.backward();
    size_t grads = 0;
    for (auto& [path, layer] : peft::lora_layers(*model))
      for (const auto& [ab, w] : {std::pair{"lora_A", layer->lora_A->weight}, std::pair{"lora_B", layer->lora_B->weight}}) {
        const Tensor& g = want.at("grad." + name + ".base_model.model." + path + "." + ab + ".weight");
        EXPECT_TENSOR_NEAR(cpu(w.grad()), g, 1e-4, 1e-4 * max_abs(g)) << path << "." << ab;
        ++grads;
      }
    size_t expected = 0;
    for (const auto& [k, t] : want) expected += k.starts_with("grad." + name + ".");
    EXPECT_EQ(grads, expected);
  }
}

TEST(PreferenceFixtures, MatchPyTorchWithTrlsDefinitions) { expect_preference_fixture_matches(Device::cpu()); }

// The same on the GPU (float32: no TF32 unless asked for).
TEST(PreferenceFixtures, MatchPyTorchWithTrlsDefinitionsOnCuda) {
  TG_REQUIRE_CUDA();
  expect_preference_fixture_matches(Device::cuda());
}

}  // namespace
}  // namespace tg
