// What the preference tests share: a tiny Llama with LoRA, pairs of token ids, and an independent
// float64 computation of completions' log-probs from the materialised logits.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "data/preference.h"
#include "nn/models/llama.h"
#include "ops/cast.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "peft/lora.h"

namespace tg::test {

inline constexpr int64_t kPrefVocab = 32;

inline nn::LlamaConfig preference_config() {
  nn::LlamaConfig c;
  c.vocab_size = kPrefVocab;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.max_position_embeddings = 24;
  c.initializer_range = 0.3;  // logits far from uniform, as a trained base has
  return c;
}

// A frozen random base with LoRA (r 2) on `targets`; adapters_b_std > 0 draws lora_B too, so the
// policy is not the base.
inline std::shared_ptr<nn::LlamaForCausalLM> lora_llama(DType dtype, double adapters_b_std,
                                                       std::vector<std::string> targets = {"q_proj", "v_proj"},
                                                       uint64_t seed = 5) {
  Generator gen(seed);
  auto model = std::make_shared<nn::LlamaForCausalLM>(preference_config(), gen);
  model->to(dtype);
  peft::apply_lora(*model, {.r = 2, .lora_alpha = 4, .target_modules = std::move(targets)}, gen);
  if (adapters_b_std > 0) {
    NoGradGuard g;
    for (auto& [path, l] : peft::lora_layers(*model)) {
      Tensor b = mul(randn(l->lora_B->weight.shape(), gen), adapters_b_std);
      copy_(l->lora_B->weight, to(b, dtype));
    }
  }
  return model;
}

// Pairs of prompts and completions of various lengths (ids in [3, kPrefVocab)).
inline std::vector<data::PreferencePair> some_pairs() {
  return {{{1, 5, 9}, {4, 7, 2}, {6, 2}},
          {{1, 11}, {12, 13, 14, 2}, {15, 2}},
          {{1, 20, 21, 22}, {23, 2}, {24, 25, 26, 27, 2}}};
}

// log softmax(logits[r, t] / temperature)[labels[r, t + 1]] for every row r and position t ([R * T],
// 0 where that label is -100 and at the last position), in float64 from the model's logits (no
// fused head), under no-grad; base: with every lora_B zeroed for the pass.
inline std::vector<double> host_token_log_probs(nn::CausalLM& model, const Tensor& ids, const Tensor& labels,
                                                bool base = false, double temperature = 1.0) {
  NoGradGuard g;
  std::vector<Tensor> saved;
  if (base)
    for (auto& [path, l] : peft::lora_layers(model)) {
      saved.push_back(clone(l->lora_B->weight));
      fill_(l->lora_B->weight, 0.0);
    }
  const Tensor logits = to(model.forward(ids), kFloat64);
  if (base) {
    size_t i = 0;
    for (auto& [path, l] : peft::lora_layers(model)) copy_(l->lora_B->weight, saved[i++]);
  }
  const int64_t R = ids.size(0), T = ids.size(1), V = logits.size(2);
  const std::vector<double> lg = logits.to_vector<double>();
  const std::vector<int64_t> lb = labels.to_vector<int64_t>();
  std::vector<double> out(static_cast<size_t>(R * T), 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t t = 0; t + 1 < T; ++t) {
      const int64_t target = lb[static_cast<size_t>(r * T + t + 1)];
      if (target == -100) continue;
      const double* row = lg.data() + (r * T + t) * V;
      double mx = row[0] / temperature, s = 0;
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, row[v] / temperature);
      for (int64_t v = 0; v < V; ++v) s += std::exp(row[v] / temperature - mx);
      out[static_cast<size_t>(r * T + t)] = row[target] / temperature - mx - std::log(s);
    }
  return out;
}

// Each row's sum of host_token_log_probs over its completion.
inline std::vector<double> host_completion_log_probs(nn::CausalLM& model, const Tensor& ids, const Tensor& labels,
                                                     bool base = false) {
  const std::vector<double> per_token = host_token_log_probs(model, ids, labels, base);
  const int64_t R = ids.size(0), T = ids.size(1);
  std::vector<double> out(static_cast<size_t>(R), 0.0);
  for (int64_t i = 0; i < R * T; ++i) out[static_cast<size_t>(i / T)] += per_token[static_cast<size_t>(i)];
  return out;
}

}  // namespace tg::test
