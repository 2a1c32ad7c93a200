// The preference losses (train/preference_losses.h) on the fused log-probs of a float64 tiny
// Llama with LoRA, against an independent float64 computation: the materialised logits' log-softmax
// on the host and TRL's formulas written out here (dpo_trainer.py, cpo_trainer.py,
// orpo_trainer.py, kto_trainer.py); every LoRA gradient against central finite differences of it.
// Also the configs' validation and the losses' argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <span>

#include "ops/shape.h"
#include "testing/testing.h"
#include "tests/preference_test_util.h"
#include "tests/test_support.h"
#include "train/detail/preference_step.h"
#include "train/preference_losses.h"

namespace tg {
namespace {

using train::PairLogProbs;
using train::PreferenceLoss;

double logsig(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); }

// A batch's completion log-probs as the host computes them: chosen, rejected, their references and token counts.
struct Host {
  std::vector<double> c, r, rc, rr, ct, rt;
};

double smoothed(double logits, double ls) { return -(1 - ls) * logsig(logits) - ls * logsig(-logits); }

// TRL's DPO losses (dpo_trainer.py _compute_loss; sigmoid's label smoothing as before 0.28).
double dpo_host(const train::DPOConfig& c, const Host& h) {
  double loss = 0;
  for (size_t k = 0; k < c.loss_type.size(); ++k) {
    std::vector<double> per;
    for (size_t i = 0; i < h.c.size(); ++i) {
      const double cl = h.c[i] - (c.reference_free ? 0 : h.rc[i]), rl = h.r[i] - (c.reference_free ? 0 : h.rr[i]);
      const double bd = c.beta * (cl - rl), ls = c.label_smoothing;
      const std::string& t = c.loss_type[k];
      if (t == "sigmoid") per.push_back(smoothed(bd, ls));
      if (t == "hinge") per.push_back(std::max(0.0, 1 - bd));
      if (t == "ipo") per.push_back(std::pow(cl / h.ct[i] - rl / h.rt[i] - 1 / (2 * c.beta), 2));
      if (t == "robust") per.push_back((-(1 - ls) * logsig(bd) + ls * logsig(-bd)) / (1 - 2 * ls));
    }
    loss += mean_of(per) * (c.loss_weights.empty() ? 1.0 : c.loss_weights[k]);
  }
  return loss;
}

double nll_host(const Host& h) {
  return -std::accumulate(h.c.begin(), h.c.end(), 0.0) / std::accumulate(h.ct.begin(), h.ct.end(), 0.0);
}

// TRL's CPOTrainer.cpo_loss (alpha 0) plus cpo_alpha times the chosen NLL.
double cpo_host(const train::CPOConfig& c, const Host& h) {
  std::vector<double> per;
  const bool avg = c.loss_type == "ipo" || c.loss_type == "simpo";
  for (size_t i = 0; i < h.c.size(); ++i) {
    double logits = avg ? h.c[i] / h.ct[i] - h.r[i] / h.rt[i] : h.c[i] - h.r[i];
    if (c.loss_type == "simpo") logits -= c.simpo_gamma / c.beta;
    if (c.loss_type == "sigmoid" || c.loss_type == "simpo") per.push_back(smoothed(c.beta * logits, c.label_smoothing));
    if (c.loss_type == "hinge") per.push_back(std::max(0.0, 1 - c.beta * logits));
    if (c.loss_type == "ipo") per.push_back(std::pow(logits - 1 / (2 * c.beta), 2));
  }
  return mean_of(per) + c.cpo_alpha * nll_host(h);
}

// TRL's ORPOTrainer: nll - mean(beta * logsigmoid(log_odds)), log1mexp as log(-expm1(x)).
double orpo_host(const train::ORPOConfig& c, const Host& h) {
  std::vector<double> ratio;
  for (size_t i = 0; i < h.c.size(); ++i) {
    const double pc = h.c[i] / h.ct[i], pr = h.r[i] / h.rt[i];
    const double log_odds = (pc - pr) - (std::log(-std::expm1(pc)) - std::log(-std::expm1(pr)));
    ratio.push_back(logsig(log_odds));
  }
  return nll_host(h) - c.beta * mean_of(ratio);
}

// TRL's KTOTrainer: the chosen rows desirable, the rejected ones not, the KL given.
double kto_host(const train::KTOConfig& c, const Host& h, double kl) {
  std::vector<double> per;
  for (size_t i = 0; i < h.c.size(); ++i) {
    const double lr = h.c[i] - h.rc[i];
    per.push_back(c.desirable_weight *
                  (c.loss_type == "kto" ? 1 - 1 / (1 + std::exp(-c.beta * (lr - kl))) : 1 - 1 / (1 + std::exp(-c.beta * lr))));
  }
  for (size_t i = 0; i < h.r.size(); ++i) {
    const double lr = h.r[i] - h.rr[i];
    per.push_back(c.undesirable_weight *
                  (c.loss_type == "kto" ? 1 - 1 / (1 + std::exp(-c.beta * (kl - lr))) : 1 / (1 + std::exp(-c.beta * lr))));
  }
  return mean_of(per);
}

struct Case {
  std::string name;
  std::function<PreferenceLoss(const PairLogProbs&)> ours;
  std::function<double(const Host&)> host;
};

std::vector<Case> cases() {
  using train::CPOConfig, train::DPOConfig, train::KTOConfig, train::ORPOConfig;
  std::vector<Case> out;
  auto dpo = [&](std::string name, DPOConfig c) {
    out.push_back({name, [c](const PairLogProbs& p) { return train::dpo_loss(c, p); },
                   [c](const Host& h) { return dpo_host(c, h); }});
  };
  dpo("dpo_sigmoid", {});
  dpo("dpo_sigmoid_smoothed", {.beta = 0.5, .label_smoothing = 0.1});
  dpo("dpo_hinge", {.beta = 0.3, .loss_type = {"hinge"}});
  dpo("dpo_ipo", {.beta = 0.2, .loss_type = {"ipo"}});
  dpo("dpo_robust", {.loss_type = {"robust"}, .label_smoothing = 0.2});
  dpo("dpo_sigmoid_and_ipo_weighted", {.loss_type = {"sigmoid", "ipo"}, .loss_weights = {0.8, 0.3}});
  dpo("dpo_reference_free", {.beta = 0.2, .reference_free = true});
  auto cpo = [&](std::string name, CPOConfig c) {
    out.push_back({name, [c](const PairLogProbs& p) { return train::cpo_loss(c, p); },
                   [c](const Host& h) { return cpo_host(c, h); }});
  };
  cpo("cpo_sigmoid", {});
  cpo("cpo_hinge", {.loss_type = "hinge", .cpo_alpha = 0.5});
  cpo("cpo_ipo", {.loss_type = "ipo"});
  cpo("simpo", {.beta = 2.0, .loss_type = "simpo", .cpo_alpha = 0.0});
  cpo("cpo_simpo_smoothed", {.beta = 2.0, .loss_type = "simpo", .label_smoothing = 0.1});
  const ORPOConfig orpo{.beta = 0.25};
  out.push_back({"orpo", [orpo](const PairLogProbs& p) { return train::orpo_loss(orpo, p); },
                 [orpo](const Host& h) { return orpo_host(orpo, h); }});
  for (const KTOConfig& k : {KTOConfig{.beta = 0.5, .undesirable_weight = 1.5},
                             KTOConfig{.loss_type = "apo_zero_unpaired", .desirable_weight = 2.0}}) {
    const double kl = 0.3;  // the batch's estimate: a constant of the loss
    out.push_back({"kto_" + k.loss_type,
                   [k, kl](const PairLogProbs& p) {  // the chosen rows desirable, the rejected not
                     std::vector<bool> desirable(p.chosen_tokens.size(), true);
                     desirable.resize(2 * p.chosen_tokens.size(), false);
                     return train::kto_loss(k, {.logps = cat({p.chosen, p.rejected}, 0),
                                                .ref_logps = cat({p.ref_chosen, p.ref_rejected}, 0),
                                                .desirable = desirable,
                                                .kl = kl});
                   },
                   [k, kl](const Host& h) { return kto_host(k, h, kl); }});
  }
  return out;
}

TEST(PreferenceLosses, MatchTrlFormulasAndFiniteDifferencesInFloat64) {
  auto model = test::lora_llama(kFloat64, 0.3);
  const data::PreferenceDataset pairs(test::some_pairs());
  const std::vector<int64_t> rows = {0, 1, 2};
  const data::PreferenceBatch b = pairs.rows_batch(rows, Device::cpu());
  const int64_t B = 3;
  auto host = [&]() {
    const std::vector<double> p = test::host_completion_log_probs(*model, b.ids, b.labels),
                              ref = test::host_completion_log_probs(*model, b.ids, b.labels, /*base=*/true);
    Host h{{p.begin(), p.begin() + B}, {p.begin() + B, p.end()}, {ref.begin(), ref.begin() + B}, {ref.begin() + B, ref.end()},
           {}, {}};
    for (int64_t i = 0; i < B; ++i) {
      h.ct.push_back(static_cast<double>(b.completion_tokens[i]));
      h.rt.push_back(static_cast<double>(b.completion_tokens[B + i]));
    }
    return h;
  };
  std::vector<Tensor> params = model->trainable_parameters();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    model->zero_grad();
    const Tensor lp = train::detail::completion_log_probs(*model, b.ids, b.labels);
    const Tensor ref = train::detail::reference_log_probs(*model, b.ids, b.labels);
    PairLogProbs p{slice(lp, 0, 0, B), slice(lp, 0, B, 2 * B), slice(ref, 0, 0, B), slice(ref, 0, B, 2 * B),
                   {b.completion_tokens.begin(), b.completion_tokens.begin() + B},
                   {b.completion_tokens.begin() + B, b.completion_tokens.end()}};
    const PreferenceLoss loss = c.ours(p);
    ASSERT_EQ(loss.loss.dtype(), kFloat64);
    loss.loss.backward();  // first: the host's reference pass writes lora_B
    const double want = c.host(host());
    EXPECT_NEAR(loss.loss.item(), want, 1e-10 * std::max(1.0, std::abs(want)));
    const double eps = 1e-5;
    for (const Tensor& w : params) {
      const std::vector<double> got = w.grad().to_vector<double>();
      double* v = w.data_ptr<double>();
      for (int64_t j = 0; j < w.numel(); ++j) {
        const double keep = v[j];
        v[j] = keep + eps;
        const double up = c.host(host());
        v[j] = keep - eps;
        const double down = c.host(host());
        v[j] = keep;
        EXPECT_NEAR(got[static_cast<size_t>(j)], (up - down) / (2 * eps), 1e-7) << "element " << j;
      }
    }
  }
}

TEST(PreferenceLosses, DpoMetricsAreTrlsRewards) {
  const Tensor c = from_vector<float>({-3.0f, -2.0f}), r = from_vector<float>({-2.5f, -4.0f});
  const Tensor rc = from_vector<float>({-3.5f, -2.2f}), rr = from_vector<float>({-2.0f, -3.0f});
  const PreferenceLoss l = train::dpo_loss({.beta = 0.5}, {c, r, rc, rr, {2, 3}, {4, 1}});
  // chosen rewards 0.5 * (0.5, 0.2) = (0.25, 0.1); rejected 0.5 * (-0.5, -1) = (-0.25, -0.5)
  EXPECT_NEAR(l.metrics.at("rewards/chosen"), 0.175, 1e-7);
  EXPECT_NEAR(l.metrics.at("rewards/rejected"), -0.375, 1e-7);
  EXPECT_NEAR(l.metrics.at("rewards/margins"), 0.55, 1e-7);
  EXPECT_EQ(l.metrics.at("rewards/accuracies"), 1.0);
  EXPECT_NEAR(l.metrics.at("logps/chosen"), -2.5, 1e-7);
  EXPECT_NEAR(l.metrics.at("logps/rejected"), -3.25, 1e-7);
  EXPECT_EQ(l.loss.dtype(), kFloat32);
  EXPECT_NEAR(l.loss.item(), (-logsig(0.5 * 1.0) - logsig(0.5 * 1.2)) / 2, 1e-6);
}

TEST(PreferenceLosses, LogSigmoidIsStableAtBothEnds) {
  const Tensor x = from_vector<double>({-800.0, -30.0, 0.0, 30.0, 800.0});
  const std::vector<double> got = train::log_sigmoid(x).to_vector<double>();
  const std::vector<double> want = {-800.0, logsig(-30.0), -std::log(2.0), logsig(30.0), 0.0};
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
}

TEST(PreferenceLosses, ConfigsAndArgumentsAreCheckedByName) {
  EXPECT_ERROR_HAS((train::DPOConfig{.beta = 0}.validate()), "DPOConfig", "beta must be > 0, got 0");
  EXPECT_ERROR_HAS((train::DPOConfig{.loss_type = {"exo_pair"}}.validate()), "loss_type 'exo_pair' is not implemented",
                   "'sigmoid', 'hinge', 'ipo', 'robust'");
  EXPECT_ERROR_HAS((train::DPOConfig{.loss_type = {"robust"}, .label_smoothing = 0.5}.validate()),
                   "label_smoothing must be in [0, 0.5) with loss_type 'robust'");
  EXPECT_ERROR_HAS((train::DPOConfig{.loss_type = {"sigmoid", "ipo"}, .loss_weights = {1.0}}.validate()),
                   "loss_weights has 1 weights for 2 loss types");
  EXPECT_ERROR_HAS((train::DPOConfig{.reference_free = true, .precompute_ref_log_probs = true}.validate()),
                   "reference_free and precompute_ref_log_probs");
  EXPECT_ERROR_HAS((train::DPOConfig{.truncation_mode = "keep_middle"}.validate()), "truncation_mode",
                   "'keep_middle'");
  EXPECT_ERROR_HAS((train::DPOConfig{.max_length = -1}.validate()), "max_length must be >= 0");
  EXPECT_ERROR_HAS((train::CPOConfig{.loss_type = "alphapo"}.validate()), "CPOConfig", "loss_type 'alphapo'");
  EXPECT_ERROR_HAS((train::CPOConfig{.cpo_alpha = -1}.validate()), "cpo_alpha must be >= 0");
  EXPECT_ERROR_HAS((train::ORPOConfig{.beta = NAN}.validate()), "ORPOConfig", "beta must be finite");
  EXPECT_ERROR_HAS((train::KTOConfig{.loss_type = "bco"}.validate()), "KTOConfig", "loss_type 'bco'");
  EXPECT_ERROR_HAS((train::KTOConfig{.undesirable_weight = 0}.validate()), "undesirable_weight must be > 0");
  const Tensor two = from_vector<float>({-1.0f, -2.0f}), three = from_vector<float>({-1.0f, -2.0f, -3.0f});
  EXPECT_ERROR_HAS(train::dpo_loss({}, {two, three, two, two, {1, 1}, {1, 1}}), "dpo_loss", "two [B] tensors");
  EXPECT_ERROR_HAS(train::dpo_loss({}, {two, two, Tensor(), Tensor(), {1, 1}, {1, 1}}), "the reference's log-probs");
  EXPECT_ERROR_HAS(train::cpo_loss({}, {two, two, {}, {}, {1}, {1, 1}}), "cpo_loss", "a token count for each");
  EXPECT_ERROR_HAS(train::kto_loss({}, {two, two, {true}, 0.0}), "kto_loss", "B desirable flags");
}

}  // namespace
}  // namespace tg
