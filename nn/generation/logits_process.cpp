#include "nn/generation/logits_process.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace tg::nn {
namespace {

constexpr float kRemoved = -std::numeric_limits<float>::infinity();

void check_no_nan(std::span<const float> scores, const char* who) {
  for (size_t j = 0; j < scores.size(); ++j)
    TG_CHECK(!std::isnan(scores[j]), who, "the model's score of token ", j, " is NaN");
}

}  // namespace

void apply_repetition_penalty(std::span<float> scores, std::span<const int32_t> tokens, double penalty) {
  if (penalty == 1.0) return;
  std::vector<bool> seen(scores.size(), false);  // each id once, however often it occurred
  for (int32_t t : tokens) {
    const size_t j = static_cast<size_t>(t);
    if (j >= scores.size() || seen[j]) continue;
    seen[j] = true;
    const float f = static_cast<float>(penalty);  // float32 arithmetic, as torch on float32 scores
    scores[j] = scores[j] < 0 ? scores[j] * f : scores[j] / f;
  }
}

void apply_temperature(std::span<float> scores, double temperature) {
  const float t = static_cast<float>(temperature);
  for (float& s : scores) s /= t;
}

void apply_top_k(std::span<float> scores, int64_t k) {
  if (k <= 0 || k >= static_cast<int64_t>(scores.size())) return;
  std::vector<float> sorted(scores.begin(), scores.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[static_cast<size_t>(k - 1)];
  for (float& s : scores)
    if (s < kth) s = kRemoved;
}

void apply_top_p(std::span<float> scores, double top_p) {
  if (top_p >= 1.0) return;
  // As transformers: ascending order, cumulative softmax, drop while it is <= 1 - top_p.
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  const double mx = scores[order.back()];
  if (!std::isfinite(mx)) return;  // nothing to rank (sample_token reports it)
  double total = 0;
  for (float s : scores) total += std::exp(static_cast<double>(s) - mx);
  double cumulative = 0;
  for (size_t i = 0; i + 1 < order.size(); ++i) {  // the most likely token always stays
    cumulative += std::exp(static_cast<double>(scores[order[i]]) - mx) / total;
    if (cumulative > 1.0 - top_p) break;
    scores[order[i]] = kRemoved;
  }
}

int32_t argmax_token(std::span<const float> scores, const char* who) {
  check_no_nan(scores, who);
  return static_cast<int32_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
}

int32_t sample_token(std::span<const float> scores, float u, const char* who) {
  check_no_nan(scores, who);
  const float mx = *std::max_element(scores.begin(), scores.end());
  TG_CHECK(std::isfinite(mx), who, "no token has a finite score (the largest is ", mx, ")");
  std::vector<double> p(scores.size());
  double total = 0;
  for (size_t j = 0; j < scores.size(); ++j) total += p[j] = std::exp(static_cast<double>(scores[j]) - mx);
  const double target = static_cast<double>(u) * total;
  double cumulative = 0;
  size_t last = 0;  // the last token with a probability, should rounding leave target unreached
  for (size_t j = 0; j < p.size(); ++j) {
    if (p[j] == 0) continue;
    cumulative += p[j];
    last = j;
    if (cumulative > target) return static_cast<int32_t>(j);
  }
  return static_cast<int32_t>(last);
}

}  // namespace tg::nn
