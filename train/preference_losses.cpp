#include "train/preference_losses.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "core/autograd.h"
#include "core/error.h"
#include "core/factory.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "ops/unary.h"

namespace tg::train {
namespace {

const Device kCpu = Device::cpu();

Tensor f64(const Tensor& x) { return to(x, kFloat64, kCpu); }

// A constant (no gradient) of the losses: the reference's log-probs, token counts.
Tensor constant(const Tensor& x) {
  NoGradGuard g;
  return f64(x.detach());
}

Tensor counts(const std::vector<int64_t>& tokens) {
  std::vector<double> v;
  for (int64_t t : tokens) v.push_back(static_cast<double>(std::max<int64_t>(t, 1)));  // TRL's clamp(min=1)
  return from_vector(v, {static_cast<int64_t>(v.size())});
}

std::vector<double> values(const Tensor& x) { return x.detach().to_vector<double>(); }

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// TRL's conservative sigmoid loss: the preference trusted with 1 - ls.
Tensor smoothed_sigmoid_loss(const Tensor& logits, double label_smoothing) {
  Tensor l = mul(log_sigmoid(logits), -(1 - label_smoothing));
  return label_smoothing == 0 ? l : sub(l, mul(log_sigmoid(neg(logits)), label_smoothing));
}

// The metrics every pairwise trainer logs, from its rewards and its (summed or averaged) log-probs.
void pair_metrics(PreferenceLoss& out, const std::vector<double>& chosen_rewards,
                  const std::vector<double>& rejected_rewards, const Tensor& chosen_logps, const Tensor& rejected_logps) {
  std::vector<double> margins, accuracies;
  for (size_t i = 0; i < chosen_rewards.size(); ++i) {
    margins.push_back(chosen_rewards[i] - rejected_rewards[i]);
    accuracies.push_back(chosen_rewards[i] > rejected_rewards[i] ? 1.0 : 0.0);
  }
  out.metrics["rewards/chosen"] = mean_of(chosen_rewards);
  out.metrics["rewards/rejected"] = mean_of(rejected_rewards);
  out.metrics["rewards/accuracies"] = mean_of(accuracies);
  out.metrics["rewards/margins"] = mean_of(margins);
  out.metrics["logps/chosen"] = mean_of(values(chosen_logps));
  out.metrics["logps/rejected"] = mean_of(values(rejected_logps));
}

std::vector<double> scaled(const Tensor& x, double s) {
  std::vector<double> v = values(x);
  for (double& e : v) e *= s;
  return v;
}

void check_pairs(const char* who, const PairLogProbs& lp, bool reference) {
  TG_CHECK(lp.chosen.defined() && lp.rejected.defined() && lp.chosen.dim() == 1 &&
               lp.chosen.shape() == lp.rejected.shape(),
           who, "wants the chosen and rejected log-probs as two [B] tensors");
  const size_t B = static_cast<size_t>(lp.chosen.shape()[0]);
  TG_CHECK(B > 0 && lp.chosen_tokens.size() == B && lp.rejected_tokens.size() == B, who,
           "wants a token count for each of the ", B, " chosen and rejected completions, got ", lp.chosen_tokens.size(),
           " and ", lp.rejected_tokens.size());
  if (reference)
    TG_CHECK(lp.ref_chosen.defined() && lp.ref_rejected.defined() && lp.ref_chosen.shape() == lp.chosen.shape() &&
                 lp.ref_rejected.shape() == lp.chosen.shape(),
             who, "wants the reference's log-probs as two [", B, "] tensors");
}

// -(sum of the chosen completions' log-probs) / their tokens: the mean cross entropy over the
// chosen completions' tokens (CPO's and ORPO's NLL).
Tensor chosen_nll(const Tensor& chosen_sums, const std::vector<int64_t>& chosen_tokens) {
  const int64_t tokens = std::accumulate(chosen_tokens.begin(), chosen_tokens.end(), int64_t{0});
  return div(neg(sum(chosen_sums)), static_cast<double>(std::max<int64_t>(tokens, 1)));
}

// log(1 - e^x) for x < 0 (ORPO's log1mexp), in float64.
Tensor log1mexp(const Tensor& x) { return log(neg(sub(exp(x), 1.0))); }

}  // namespace

Tensor log_sigmoid(const Tensor& x) {
  const Shape shape = x.shape();
  Tensor col = reshape(x, {x.numel(), 1});
  Tensor pair = cat({col, zeros({x.numel(), 1}, x.options())}, 1);
  return reshape(slice(log_softmax(pair, 1), 1, 0, 1), shape);
}

PreferenceLoss dpo_loss(const DPOConfig& c, const PairLogProbs& lp) {
  check_pairs("dpo_loss", lp, !c.reference_free);
  const Device dev = lp.chosen.device();
  Tensor chosen = f64(lp.chosen), rejected = f64(lp.rejected);
  Tensor chosen_ratio = chosen, rejected_ratio = rejected;  // reference_free: the reference's log-probs are 0
  if (!c.reference_free) {
    chosen_ratio = sub(chosen, constant(lp.ref_chosen));
    rejected_ratio = sub(rejected, constant(lp.ref_rejected));
  }
  Tensor delta = sub(chosen_ratio, rejected_ratio), beta_delta = mul(delta, c.beta);
  Tensor loss;
  for (size_t i = 0; i < c.loss_type.size(); ++i) {
    const std::string& type = c.loss_type[i];
    Tensor per;
    if (type == "sigmoid") {
      per = smoothed_sigmoid_loss(beta_delta, c.label_smoothing);
    } else if (type == "hinge") {
      per = relu(neg(sub(beta_delta, 1.0)));
    } else if (type == "ipo") {  // on scores averaged over each completion's tokens, as TRL
      Tensor avg = sub(div(chosen_ratio, counts(lp.chosen_tokens)), div(rejected_ratio, counts(lp.rejected_tokens)));
      per = pow(sub(avg, 1 / (2 * c.beta)), 2.0);
    } else if (type == "robust") {
      Tensor clean = mul(log_sigmoid(beta_delta), -(1 - c.label_smoothing));
      Tensor flipped = mul(log_sigmoid(neg(beta_delta)), -c.label_smoothing);
      per = div(sub(clean, flipped), 1 - 2 * c.label_smoothing);
    } else {
      fail("dpo_loss", "loss_type '", type, "' is not implemented");
    }
    Tensor term = mul(mean(per), c.loss_weights.empty() ? 1.0 : c.loss_weights[i]);
    loss = loss.defined() ? add(loss, term) : term;
  }
  PreferenceLoss out{to(loss, lp.chosen.dtype(), dev), {}};
  pair_metrics(out, scaled(chosen_ratio, c.beta), scaled(rejected_ratio, c.beta), chosen, rejected);
  return out;
}

PreferenceLoss cpo_loss(const CPOConfig& c, const PairLogProbs& lp) {
  check_pairs("cpo_loss", lp, false);
  const Device dev = lp.chosen.device();
  Tensor chosen_sums = f64(lp.chosen);
  Tensor chosen = chosen_sums, rejected = f64(lp.rejected);
  if (c.loss_type == "ipo" || c.loss_type == "simpo") {  // TRL's average_log_prob
    chosen = div(chosen, counts(lp.chosen_tokens));
    rejected = div(rejected, counts(lp.rejected_tokens));
  }
  Tensor logits = sub(chosen, rejected);
  Tensor per;
  if (c.loss_type == "simpo") per = smoothed_sigmoid_loss(mul(sub(logits, c.simpo_gamma / c.beta), c.beta), c.label_smoothing);
  else if (c.loss_type == "sigmoid") per = smoothed_sigmoid_loss(mul(logits, c.beta), c.label_smoothing);
  else if (c.loss_type == "hinge") per = relu(neg(sub(mul(logits, c.beta), 1.0)));
  else if (c.loss_type == "ipo") per = pow(sub(logits, 1 / (2 * c.beta)), 2.0);
  else fail("cpo_loss", "loss_type '", c.loss_type, "' is not implemented");
  Tensor nll = chosen_nll(chosen_sums, lp.chosen_tokens);
  Tensor loss = mean(per);
  if (c.cpo_alpha != 0) loss = add(loss, mul(nll, c.cpo_alpha));
  PreferenceLoss out{to(loss, lp.chosen.dtype(), dev), {}};
  pair_metrics(out, scaled(chosen, c.beta), scaled(rejected, c.beta), chosen, rejected);
  out.metrics["nll_loss"] = nll.item();
  return out;
}

PreferenceLoss orpo_loss(const ORPOConfig& c, const PairLogProbs& lp) {
  check_pairs("orpo_loss", lp, false);
  const Device dev = lp.chosen.device();
  Tensor chosen_sums = f64(lp.chosen);
  Tensor chosen = div(chosen_sums, counts(lp.chosen_tokens)), rejected = div(f64(lp.rejected), counts(lp.rejected_tokens));
  Tensor log_odds = sub(sub(chosen, rejected), sub(log1mexp(chosen), log1mexp(rejected)));
  Tensor ratio = log_sigmoid(log_odds);
  Tensor nll = chosen_nll(chosen_sums, lp.chosen_tokens);
  Tensor loss = sub(nll, mul(mean(ratio), c.beta));
  PreferenceLoss out{to(loss, lp.chosen.dtype(), dev), {}};
  pair_metrics(out, scaled(chosen, c.beta), scaled(rejected, c.beta), chosen, rejected);
  out.metrics["nll_loss"] = nll.item();
  out.metrics["log_odds_ratio"] = mean_of(values(ratio));
  out.metrics["log_odds_chosen"] = mean_of(values(log_odds));
  return out;
}

PreferenceLoss kto_loss(const KTOConfig& c, const UnpairedLogProbs& lp) {
  TG_CHECK(lp.logps.defined() && lp.ref_logps.defined() && lp.logps.dim() == 1 && lp.logps.shape() == lp.ref_logps.shape() &&
               static_cast<size_t>(lp.logps.shape()[0]) == lp.desirable.size() && !lp.desirable.empty(),
           "kto_loss", "wants the policy's and the reference's log-probs as [B] tensors and B desirable flags");
  const Device dev = lp.logps.device();
  Tensor logps = f64(lp.logps), ratio = sub(logps, constant(lp.ref_logps));
  std::vector<double> flags;
  for (bool d : lp.desirable) flags.push_back(d ? 1.0 : 0.0);
  const int64_t B = static_cast<int64_t>(flags.size());
  const Tensor desirable = from_vector(flags, {B});
  const Tensor undesirable = neg(sub(desirable, 1.0));
  Tensor chosen_loss, rejected_loss;
  if (c.loss_type == "kto") {  // the KTO paper's Eq. (7)
    chosen_loss = neg(sub(sigmoid(mul(sub(ratio, lp.kl), c.beta)), 1.0));
    rejected_loss = neg(sub(sigmoid(mul(add(neg(ratio), lp.kl), c.beta)), 1.0));
  } else {  // apo_zero_unpaired
    chosen_loss = neg(sub(sigmoid(mul(ratio, c.beta)), 1.0));
    rejected_loss = sigmoid(mul(ratio, c.beta));
  }
  Tensor per = add(mul(mul(chosen_loss, desirable), c.desirable_weight),
                   mul(mul(rejected_loss, undesirable), c.undesirable_weight));
  PreferenceLoss out{to(mean(per), lp.logps.dtype(), dev), {}};
  const std::vector<double> r = values(ratio), l = values(logps);
  std::vector<double> rewards[2], logs[2];
  for (int64_t i = 0; i < B; ++i) {
    rewards[flags[i] > 0].push_back(c.beta * r[i]);
    logs[flags[i] > 0].push_back(l[i]);
  }
  out.metrics["kl"] = lp.kl;
  if (!rewards[1].empty()) out.metrics["rewards/chosen"] = mean_of(rewards[1]), out.metrics["logps/chosen"] = mean_of(logs[1]);
  if (!rewards[0].empty())
    out.metrics["rewards/rejected"] = mean_of(rewards[0]), out.metrics["logps/rejected"] = mean_of(logs[0]);
  if (!rewards[0].empty() && !rewards[1].empty())
    out.metrics["rewards/margins"] = mean_of(rewards[1]) - mean_of(rewards[0]);
  return out;
}

PreferenceLoss grpo_loss(const GRPOConfig& c, const GRPOLogProbs& lp) {
  const char* who = "grpo_loss";
  TG_CHECK(lp.logps.defined() && lp.logps.dim() == 2 && lp.mask.defined() && lp.mask.shape() == lp.logps.shape(), who,
           "wants the policy's log-probs and the mask as [B, T] tensors");
  const int64_t B = lp.logps.size(0), T = lp.logps.size(1);
  TG_CHECK(lp.advantages.size() == static_cast<size_t>(B) && lp.completion_tokens.size() == static_cast<size_t>(B),
           who, "wants an advantage and a token count for each of the ", B, " completions");
  TG_CHECK(c.beta == 0 || (lp.ref_logps.defined() && lp.ref_logps.shape() == lp.logps.shape()), who,
           "beta ", c.beta, " wants the reference's log-probs as a [B, T] tensor");
  const Device dev = lp.logps.device();
  const Tensor advantages = to(from_vector(lp.advantages, {B, 1}), lp.logps.dtype(), dev);
  const Tensor old = lp.old_logps.defined() ? lp.old_logps : lp.logps.detach();
  const Tensor ratio = exp(sub(lp.logps, old));
  const double low = 1 - c.epsilon, high = 1 + (c.epsilon_high > 0 ? c.epsilon_high : c.epsilon);
  // clamp(ratio, low, high) and -min(l1, l2) through relu (whose gradients are clamp's and min's)
  const Tensor clipped = add(sub(relu(sub(ratio, low)), relu(sub(ratio, high))), low);
  const Tensor l1 = mul(ratio, advantages), l2 = mul(clipped, advantages);
  Tensor per_token = neg(sub(l1, relu(sub(l1, l2))));
  Tensor kl;
  if (c.beta > 0) {
    const Tensor d = sub(lp.ref_logps, lp.logps);
    kl = sub(sub(exp(d), d), 1.0);
    per_token = add(per_token, mul(kl, c.beta));
  }
  const Tensor masked = mul(per_token, lp.mask);
  const int64_t tokens = std::accumulate(lp.completion_tokens.begin(), lp.completion_tokens.end(), int64_t{0});
  Tensor loss;
  if (c.loss_type == "grpo") {  // each completion's mean, then their mean
    std::vector<float> counts;
    for (int64_t n : lp.completion_tokens) counts.push_back(static_cast<float>(std::max<int64_t>(n, 1)));
    loss = mean(div(sum(masked, {1}), to(from_vector(counts, {B}), lp.logps.dtype(), dev)));
  } else if (c.loss_type == "bnpo") {
    loss = div(sum(masked), static_cast<double>(std::max<int64_t>(tokens, 1)));
  } else if (c.loss_type == "dr_grpo") {
    loss = div(sum(masked), static_cast<double>(B * c.max_completion_length));
  } else if (c.loss_type == "dapo") {
    loss = div(sum(masked), static_cast<double>(std::max<int64_t>(lp.step_tokens, 1)));
  } else {
    fail(who, "loss_type '", c.loss_type, "' is not implemented");
  }
  // TRL's metrics: means over the tokens that count
  const std::vector<double> r = to(ratio, kFloat64, kCpu).to_vector<double>(), m = to(lp.mask, kFloat64, kCpu).to_vector<double>();
  const std::vector<double> k = kl.defined() ? to(kl.detach(), kFloat64, kCpu).to_vector<double>() : std::vector<double>();
  double lows = 0, highs = 0, kl_sum = 0, counted = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    if (m[static_cast<size_t>(i)] == 0) continue;
    const double a = lp.advantages[static_cast<size_t>(i / T)], v = r[static_cast<size_t>(i)];
    lows += v < low && a < 0;
    highs += v > high && a > 0;
    if (!k.empty()) kl_sum += k[static_cast<size_t>(i)];
    ++counted;
  }
  PreferenceLoss out{loss, {}};
  const double n = std::max(counted, 1.0);
  out.metrics["clip_ratio/low_mean"] = lows / n;
  out.metrics["clip_ratio/high_mean"] = highs / n;
  out.metrics["clip_ratio/region_mean"] = (lows + highs) / n;
  if (kl.defined()) out.metrics["kl"] = kl_sum / n;
  return out;
}

std::vector<double> grpo_advantages(const GRPOConfig& c, const std::vector<double>& rewards, int64_t& zero_std) {
  const size_t G = static_cast<size_t>(c.num_generations), N = rewards.size();
  TG_CHECK(N > 0 && N % G == 0, "grpo_advantages", "wants whole groups of num_generations ", G, " rewards, got ", N);
  auto std_of = [](std::span<const double> v, double m) {  // TRL's nanstd: Bessel's correction
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return v.size() > 1 ? std::sqrt(s / static_cast<double>(v.size() - 1)) : NAN;
  };
  const double all_mean = std::accumulate(rewards.begin(), rewards.end(), 0.0) / static_cast<double>(N);
  const double all_std = std_of(rewards, all_mean);
  std::vector<double> out(N);
  zero_std = 0;
  for (size_t g0 = 0; g0 < N; g0 += G) {
    const std::span<const double> group(rewards.data() + g0, G);
    const double m = std::accumulate(group.begin(), group.end(), 0.0) / static_cast<double>(G);
    const double s = c.scale_rewards == "batch" ? all_std : std_of(group, m);
    for (size_t i = g0; i < g0 + G; ++i) {
      out[i] = c.scale_rewards == "none" ? rewards[i] - m : (rewards[i] - m) / (s + 1e-4);
      zero_std += std::abs(s) <= 1e-8;  // torch.isclose(std, 0)
    }
  }
  return out;
}

}  // namespace tg::train
