// nn::CausalLM::token_log_probs (the fused head's rows, or the logits where the head is not a
// plain product) against the materialised logits' log-softmax in float64, with a temperature.
#include <gtest/gtest.h>

#include <cmath>

#include "core/trace.h"
#include "nn/loss.h"
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

}  // namespace
}  // namespace tg
