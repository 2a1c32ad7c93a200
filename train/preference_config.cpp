#include "train/preference_config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tg::train {
namespace {

void check_finite(const char* who, const char* field, double v) {
  TG_CHECK(std::isfinite(v), who, field, " must be finite, got ", v);
}

void check_beta(const char* who, double beta) {
  check_finite(who, "beta", beta);
  TG_CHECK(beta > 0, who, "beta must be > 0, got ", beta);
}

void check_one_of(const char* who, const char* field, const std::string& v, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return;
    list += std::string(list.empty() ? "" : ", ") + "'" + a + "'";
  }
  fail(who, field, " '", v, "' is not implemented (one of ", list, ")");
}

// The fields every preference config shares: its truncation and disable_dropout.
template <class Config>
json::Value common_json(const Config& c) {
  json::Value v = json::Value::object();
  v.set("beta", c.beta)
      .set("max_length", c.max_length)
      .set("truncation_mode", c.truncation_mode)
      .set("max_prompt_length", c.max_prompt_length)
      .set("max_completion_length", c.max_completion_length)
      .set("disable_dropout", c.disable_dropout);
  return v;
}

template <class Config>
void check_common(const char* who, const Config& c) {
  check_beta(who, c.beta);
  truncation_of(c).validate(who);
}

void check_precompute(const char* who, int64_t batch_size) {
  TG_CHECK(batch_size >= 0, who, "precompute_ref_batch_size must be >= 0 (0: the training batch size), got ",
           batch_size);
}

}  // namespace

void DPOConfig::validate() const {
  const char* who = "DPOConfig";
  check_common(who, *this);
  TG_CHECK(!loss_type.empty(), who, "loss_type is empty (give at least one, e.g. \"sigmoid\")");
  for (const std::string& t : loss_type) check_one_of(who, "loss_type", t, {"sigmoid", "hinge", "ipo", "robust"});
  TG_CHECK(loss_weights.empty() || loss_weights.size() == loss_type.size(), who, "loss_weights has ",
           loss_weights.size(), " weights for ", loss_type.size(), " loss types");
  for (double w : loss_weights) check_finite(who, "each of loss_weights", w);
  check_finite(who, "label_smoothing", label_smoothing);
  const bool robust = std::find(loss_type.begin(), loss_type.end(), "robust") != loss_type.end();
  TG_CHECK(label_smoothing >= 0 && label_smoothing < (robust ? 0.5 : 1.0), who, "label_smoothing must be in [0, ",
           robust ? "0.5) with loss_type 'robust'" : "1)", ", got ", label_smoothing);
  TG_CHECK(!(reference_free && precompute_ref_log_probs), who,
           "reference_free and precompute_ref_log_probs are both true: there is no reference to precompute");
  check_precompute(who, precompute_ref_batch_size);
}

json::Value DPOConfig::to_json() const {
  json::Value types = json::Value::array(), weights = json::Value::array();
  for (const std::string& t : loss_type) types.push_back(t);
  for (double w : loss_weights) weights.push_back(w);
  json::Value v = common_json(*this);
  v.set("loss_type", types)
      .set("loss_weights", weights)
      .set("label_smoothing", label_smoothing)
      .set("reference_free", reference_free)
      .set("precompute_ref_log_probs", precompute_ref_log_probs)
      .set("precompute_ref_batch_size", precompute_ref_batch_size);
  return v;
}

void CPOConfig::validate() const {
  const char* who = "CPOConfig";
  check_common(who, *this);
  check_one_of(who, "loss_type", loss_type, {"sigmoid", "hinge", "ipo", "simpo"});
  check_finite(who, "label_smoothing", label_smoothing);
  TG_CHECK(label_smoothing >= 0 && label_smoothing < 1, who, "label_smoothing must be in [0, 1), got ",
           label_smoothing);
  check_finite(who, "cpo_alpha", cpo_alpha);
  TG_CHECK(cpo_alpha >= 0, who, "cpo_alpha must be >= 0, got ", cpo_alpha);
  check_finite(who, "simpo_gamma", simpo_gamma);
}

json::Value CPOConfig::to_json() const {
  json::Value v = common_json(*this);
  v.set("loss_type", loss_type)
      .set("label_smoothing", label_smoothing)
      .set("cpo_alpha", cpo_alpha)
      .set("simpo_gamma", simpo_gamma);
  return v;
}

void ORPOConfig::validate() const { check_common("ORPOConfig", *this); }

json::Value ORPOConfig::to_json() const { return common_json(*this); }

void KTOConfig::validate() const {
  const char* who = "KTOConfig";
  check_common(who, *this);
  check_one_of(who, "loss_type", loss_type, {"kto", "apo_zero_unpaired"});
  for (auto [field, w] : {std::pair{"desirable_weight", desirable_weight}, {"undesirable_weight", undesirable_weight}}) {
    check_finite(who, field, w);
    TG_CHECK(w > 0, who, field, " must be > 0, got ", w);
  }
  check_precompute(who, precompute_ref_batch_size);
}

json::Value KTOConfig::to_json() const {
  json::Value v = common_json(*this);
  v.set("loss_type", loss_type)
      .set("desirable_weight", desirable_weight)
      .set("undesirable_weight", undesirable_weight)
      .set("precompute_ref_log_probs", precompute_ref_log_probs)
      .set("precompute_ref_batch_size", precompute_ref_batch_size);
  return v;
}

}  // namespace tg::train
