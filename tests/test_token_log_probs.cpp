// nn::CausalLM::token_log_probs (the fused head's rows, or the logits where the head is not a
// plain product) against the materialised logits' log-softmax in float64, with a temperature;
// peft::disable_adapter (the base alone, restored after, merged layers refused); and the
// reference pass of preference training: under no-grad with the adapters off it records no node
// and keeps no tensor, and runs the loss-only head kernel.
#include <gtest/gtest.h>

#include <cmath>

#include "core/trace.h"
#include "nn/loss.h"
#include "ops/binary.h"
#include "ops/reduce.h"
#include "testing/testing.h"
#include "tests/preference_test_util.h"
#include "tests/test_support.h"

namespace tg {
namespace {

// Three rows of a prompt and a completion, right-padded: ids and labels (-100 but on the completion).
struct Rows {
  Tensor ids, labels;
};
Rows some_rows() {
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {1, 11}, {1, 20, 21, 22}};
  const std::vector<std::vector<int32_t>> completions = {{4, 7, 2}, {12, 13, 14, 2}, {24, 25, 26, 27, 2}};
  const int64_t T = 9;
  std::vector<int64_t> ids(3 * T, 0), labels(3 * T, -100);
  for (size_t r = 0; r < 3; ++r) {
    size_t t = 0;
    for (int32_t id : prompts[r]) ids[r * T + t++] = id;
    for (int32_t id : completions[r]) ids[r * T + t] = labels[r * T + t] = id, ++t;
  }
  return {from_vector(ids, {3, T}), from_vector(labels, {3, T})};
}

// Each row's log-probs summed over its completion, from token_log_probs [B, T].
std::vector<double> row_sums(const Tensor& per_token) { return sum(per_token, {1}).to_vector<double>(); }

TEST(TokenLogProbs, FusedAndLogitsPathsMatchTheLogitsLogSoftmaxInFloat64) {
  const Rows b = some_rows();
  // q/v LoRA: a plain head (the fused rows); LoRA on lm_head too: the logits path
  for (const std::vector<std::string>& targets : {std::vector<std::string>{"q_proj", "v_proj"},
                                                  std::vector<std::string>{"q_proj", "lm_head"}}) {
    SCOPED_TRACE(targets.back());
    auto model = test::lora_llama(kFloat64, 0.3, targets);
    KernelTrace trace;
    const Tensor lp = model->token_log_probs(b.ids, b.labels);
    EXPECT_EQ(trace.contains("linear_cross_entropy.dx"), targets.back() != "lm_head");
    ASSERT_EQ(lp.shape(), b.ids.shape());
    const std::vector<double> got = row_sums(lp), want = test::host_completion_log_probs(*model, b.ids, b.labels);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "row " << i;
    // masked positions are exactly 0, the last position too
    const std::vector<double> v = lp.to_vector<double>();
    const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
    const int64_t T = b.ids.size(1);
    for (size_t i = 0; i < v.size(); ++i) {
      const bool last = static_cast<int64_t>(i) % T == T - 1;
      if (last || labels[i + 1] == -100) EXPECT_EQ(v[i], 0.0) << i;
    }
  }
}

TEST(TokenLogProbs, TemperatureDividesTheLogits) {
  auto model = test::lora_llama(kFloat64, 0.3);
  const Rows b = some_rows();
  const std::vector<double> got = row_sums(model->token_log_probs(b.ids, b.labels, Tensor(), 0.7));
  // the same model with its head scaled by 1 / 0.7
  {
    NoGradGuard g;
    copy_(model->lm_head->weight, div(model->lm_head->weight, 0.7));
  }
  const std::vector<double> want = test::host_completion_log_probs(*model, b.ids, b.labels);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "row " << i;
  EXPECT_ERROR_HAS(model->token_log_probs(b.ids, b.labels, Tensor(), 0.0), "token_log_probs", "temperature must be > 0");
}

TEST(TokenLogProbs, ShapesAreChecked) {
  EXPECT_ERROR_HAS(nn::next_token_log_probs(zeros({2, 3, 5}), zeros({2, 4}, {kInt64})), "next_token_log_probs",
                   "logits [B, T, V] and labels [B, T]");
  EXPECT_ERROR_HAS(nn::next_token_log_probs_from_hidden(zeros({2, 3, 5}), zeros({7, 5}), zeros({3, 3}, {kInt64})),
                   "next_token_log_probs_from_hidden", "hidden [B, T, H]");
}

TEST(DisableAdapter, GivesTheBaseAloneAndRestoresEachLayer) {
  auto model = test::lora_llama(kFloat32, 0.3);
  const Rows b = some_rows();
  const std::vector<double> base = test::host_completion_log_probs(*model, b.ids, b.labels, /*base=*/true);
  const std::vector<double> policy = row_sums(model->token_log_probs(b.ids, b.labels));
  auto layers = peft::lora_layers(*model);
  layers[1].second->set_adapter_enabled(false);  // one layer already off stays off after the guard
  {
    peft::AdapterDisabled off = peft::disable_adapter(*model);
    const std::vector<double> got = row_sums(model->token_log_probs(b.ids, b.labels));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], base[i], 1e-5) << "row " << i;
    EXPECT_ERROR_HAS(layers[0].second->merge(), "the adapter is disabled");
  }
  EXPECT_TRUE(layers[0].second->adapter_enabled());
  EXPECT_FALSE(layers[1].second->adapter_enabled());
  layers[1].second->set_adapter_enabled(true);
  const std::vector<double> again = row_sums(model->token_log_probs(b.ids, b.labels));
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i], policy[i]) << "row " << i;

  peft::merge(*model);
  EXPECT_ERROR_HAS(peft::AdapterDisabled off(*model), "peft::disable_adapter", "is merged into its base weight");
  nn::LlamaForCausalLM plain(test::preference_config());
  EXPECT_ERROR_HAS(peft::AdapterDisabled off(plain), "the model has no LoRA layer");
}

// The reference of DPO / KTO / GRPO: the same model, adapters off, under no-grad. The loss's
// backward plan is the one it has with a constant in its place: no node, no saved tensor.
TEST(DisableAdapter, TheReferencePassRecordsNothingAndKeepsNothing) {
  auto model = test::lora_llama(kFloat32, 0.3);
  const Rows b = some_rows();
  const Tensor policy = sum(model->token_log_probs(b.ids, b.labels), {1});
  KernelTrace trace;
  Tensor ref;
  {
    NoGradGuard no_grad;
    peft::AdapterDisabled base(*model);
    ref = sum(model->token_log_probs(b.ids, b.labels), {1});
  }
  EXPECT_TRUE(trace.contains("linear_cross_entropy.loss"));  // the head's loss kernel alone
  EXPECT_FALSE(trace.contains("linear_cross_entropy.dx"));
  EXPECT_FALSE(ref.requires_grad());
  EXPECT_EQ(ref.grad_fn(), nullptr);
  const std::string with_ref = format_plan(backward_plan({sum(sub(policy, ref))}));
  const std::string with_constant = format_plan(backward_plan({sum(sub(policy, zeros_like(ref)))}));
  EXPECT_EQ(with_ref, with_constant);
  EXPECT_TRUE(peft::lora_layers(*model)[0].second->adapter_enabled());  // the guard ended with the pass
}

}  // namespace
}  // namespace tg
