#include "nn/models/causal_lm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/attention.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "nn/models/architecture.h"
#include "nn/moe.h"
#include "ops/cast.h"
#include "ops/unary.h"

namespace tg::nn {

Tensor CausalLM::hidden_states(const Tensor& ids, const Tensor& position_ids) {
  TG_CHECK(!position_ids.defined(), architecture().name.c_str(), "this family does not take position_ids (packed rows): "
           "use data::Layout::Pack or Pad, or implement CausalLM::hidden_states(ids, position_ids)");
  return hidden_states(ids);
}

bool CausalLM::logits_are_head_product() const { return lm_head->is_plain() && !lm_head->bias.defined(); }

Tensor CausalLM::loss(const Tensor& ids, const Tensor& labels, const Tensor& position_ids) {
  if (!logits_are_head_product()) return causal_lm_loss(logits(hidden_states(ids, position_ids)), labels);
  return causal_lm_loss_from_hidden(hidden_states(ids, position_ids), lm_head->weight, labels);
}

Tensor CausalLM::token_log_probs(const Tensor& ids, const Tensor& labels, const Tensor& position_ids,
                                 double temperature) {
  TG_CHECK(std::isfinite(temperature) && temperature > 0, "token_log_probs", "temperature must be > 0, got ",
           temperature);
  Tensor hidden = hidden_states(ids, position_ids);
  if (!logits_are_head_product()) {
    Tensor l = logits(hidden);
    return next_token_log_probs(temperature == 1.0 ? l : div(l, temperature), labels);
  }
  // (h / t) W^T = (h W^T) / t: the temperature scales the smaller tensor
  return next_token_log_probs_from_hidden(temperature == 1.0 ? hidden : div(hidden, temperature), lm_head->weight,
                                          labels);
}

void CausalLM::init_weights(double std, bool tie_head, Generator& gen,
                            const std::function<double(const std::string& name)>& linear_std) {
  for (auto& [name, m] : named_modules()) {
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      if (tie_head && lin == lm_head.get()) init::reserve_draw(lin->weight, gen);  // tied below
      else init::normal_(lin->weight, 0.0, linear_std ? linear_std(name) : std, gen);
      if (lin->bias.defined()) init::zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<Embedding*>(m)) {
      init::normal_(emb->weight, 0.0, std, gen);
    } else if (auto* experts = dynamic_cast<MoeExperts*>(m)) {
      experts->init(std, gen);
    } else if (auto* attention = dynamic_cast<CausalSelfAttention*>(m); attention && attention->sinks.defined()) {
      init::normal_(attention->sinks, 0.0, std, gen);
    }
  }
  if (tie_head) lm_head->weight = input_embeddings().weight;
}

void check_ids(const char* who, const Tensor& ids) {
  TG_CHECK(ids.defined() && ids.dim() == 2 && is_integral(ids.dtype()) && ids.dtype() != kBool, who,
           "ids must be [B, T] int32/int64, got ", ids.defined() ? shape_str(ids.shape()) : std::string("undefined"),
           ids.defined() ? std::string(" ") + dtype_name(ids.dtype()) : std::string());
}

void check_ids(const char* who, const Tensor& ids, const KVCache& cache, int64_t num_layers) {
  TG_CHECK(ids.defined() && ids.dim() == 2 && is_integral(ids.dtype()) && ids.dtype() != kBool &&
               ids.shape()[0] == cache.batch() && cache.num_layers() == num_layers,
           who, "a cached forward wants ids [", cache.batch(), ", T] int32/int64 for a KVCache of ",
           cache.num_layers(), " layers (the model has ", num_layers, "), got ",
           ids.defined() ? shape_str(ids.shape()) : std::string("undefined"));
}

void check_position_ids(const char* who, const Tensor& ids, const Tensor& position_ids, int64_t context) {
  TG_CHECK(is_integral(position_ids.dtype()) && position_ids.dtype() != kBool, who,
           "position_ids must be int32 or int64, got ", dtype_name(position_ids.dtype()));
  TG_CHECK(position_ids.shape() == ids.shape(), who, "position_ids must be ", ids.shape(), " as ids, got ",
           position_ids.shape());
  TG_CHECK(position_ids.device() == ids.device(), who, "position_ids are on ", position_ids.device(), ", ids on ",
           ids.device());
  if (!position_ids.device().is_cpu() || position_ids.numel() == 0) return;
  const std::vector<int64_t> pos = to(position_ids, kInt64).to_vector<int64_t>();
  const auto [lo, hi] = std::minmax_element(pos.begin(), pos.end());
  TG_CHECK(*lo >= 0 && *hi < context, who, "position_ids hold ", *lo < 0 ? *lo : *hi, ", outside [0, ", context,
           ") (the model's context)");
}

}  // namespace tg::nn
