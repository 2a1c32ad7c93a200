#include "train/grpo_config.h"

#include <cmath>

#include "core/error.h"

namespace tg::train {

void GRPOConfig::validate() const {
  const char* who = "GRPOConfig";
  TG_CHECK(num_generations >= 2, who, "num_generations must be >= 2 (a group's advantages compare its completions), got ",
           num_generations);
  TG_CHECK(max_completion_length >= 1, who, "max_completion_length must be >= 1, got ", max_completion_length);
  for (auto [field, v] : {std::pair{"temperature", temperature}, {"top_p", top_p},
                          {"repetition_penalty", repetition_penalty}, {"beta", beta}, {"epsilon", epsilon},
                          {"epsilon_high", epsilon_high}})
    TG_CHECK(std::isfinite(v), who, field, " must be finite, got ", v);
  TG_CHECK(temperature > 0, who, "temperature must be > 0 (GRPO samples), got ", temperature);
  TG_CHECK(top_p > 0 && top_p <= 1, who, "top_p must be in (0, 1], got ", top_p);
  TG_CHECK(top_k >= 0, who, "top_k must be >= 0 (0: none), got ", top_k);
  TG_CHECK(repetition_penalty > 0, who, "repetition_penalty must be > 0, got ", repetition_penalty);
  TG_CHECK(beta >= 0, who, "beta must be >= 0, got ", beta);
  TG_CHECK(num_iterations >= 1, who, "num_iterations must be >= 1, got ", num_iterations);
  TG_CHECK(epsilon > 0 && epsilon < 1, who, "epsilon must be in (0, 1), got ", epsilon);
  TG_CHECK(epsilon_high >= 0, who, "epsilon_high must be >= 0 (0: epsilon), got ", epsilon_high);
  TG_CHECK(scale_rewards == "group" || scale_rewards == "batch" || scale_rewards == "none", who,
           "scale_rewards must be 'group', 'batch' or 'none', got '", scale_rewards, "'");
  TG_CHECK(loss_type == "grpo" || loss_type == "bnpo" || loss_type == "dr_grpo" || loss_type == "dapo", who,
           "loss_type '", loss_type, "' is not implemented (one of 'grpo', 'bnpo', 'dr_grpo', 'dapo')");
  for (double w : reward_weights) TG_CHECK(std::isfinite(w), who, "each of reward_weights must be finite, got ", w);
}

json::Value GRPOConfig::to_json() const {
  json::Value weights = json::Value::array();
  for (double w : reward_weights) weights.push_back(w);
  json::Value v = json::Value::object();
  v.set("num_generations", num_generations)
      .set("max_completion_length", max_completion_length)
      .set("temperature", temperature)
      .set("top_p", top_p)
      .set("top_k", top_k)
      .set("repetition_penalty", repetition_penalty)
      .set("beta", beta)
      .set("num_iterations", num_iterations)
      .set("epsilon", epsilon)
      .set("epsilon_high", epsilon_high)
      .set("scale_rewards", scale_rewards)
      .set("loss_type", loss_type)
      .set("mask_truncated_completions", mask_truncated_completions)
      .set("reward_weights", weights);
  return v;
}

}  // namespace tg::train
