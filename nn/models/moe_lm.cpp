#include "nn/models/moe_lm.h"

#include <algorithm>

namespace tg::nn {

bool MoeConfig::is_sparse(int64_t layer) const {
  if (base.architecture != "Qwen3MoeForCausalLM") return true;
  const bool dense = std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end();
  return !dense && (layer + 1) % decoder_sparse_step == 0;
}

void MoeConfig::validate() const {
  base.validate();
  const char* who = "MoeConfig";
  TG_CHECK(num_experts >= 1 && num_experts_per_tok >= 1 && num_experts_per_tok <= num_experts, who,
           "num_experts_per_tok ", num_experts_per_tok, " must be in [1, num_experts ", num_experts, "]");
  TG_CHECK(moe_intermediate_size >= 0 && decoder_sparse_step >= 1, who,
           "moe_intermediate_size must be >= 0 and decoder_sparse_step >= 1, got ", moe_intermediate_size, " and ",
           decoder_sparse_step);
  for (int64_t l : mlp_only_layers)
    TG_CHECK(l >= 0 && l < base.num_hidden_layers, who, "mlp_only_layers holds ", l, ", not a layer of ",
             base.num_hidden_layers);
  TG_CHECK(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == base.num_hidden_layers, who,
           "layer_types has ", sliding_layers.size(), " entries for num_hidden_layers ", base.num_hidden_layers);
  TG_CHECK(router_aux_loss_coef >= 0 && swiglu_alpha > 0 && swiglu_limit > 0, who,
           "router_aux_loss_coef must be >= 0, swiglu_alpha and swiglu_limit positive, got ", router_aux_loss_coef,
           ", ", swiglu_alpha, ", ", swiglu_limit);
}

DecoderSpec moe_spec(const MoeConfig& c) {
  c.validate();
  DecoderSpec s = llama_spec(c.base);
  const std::string& arch = c.base.architecture;
  s.family = arch.substr(0, arch.size() - std::string("ForCausalLM").size());
  DecoderSpec::Moe moe;
  moe.block.num_experts = c.num_experts;
  moe.block.top_k = c.num_experts_per_tok;
  moe.block.intermediate_size = c.expert_intermediate_size();
  moe.block.norm_topk_prob = c.norm_topk_prob;
  moe.output_router_logits = c.output_router_logits;
  moe.router_aux_loss_coef = c.router_aux_loss_coef;
  for (int64_t i = 0; i < c.base.num_hidden_layers; ++i) moe.sparse_layers.push_back(c.is_sparse(i));
  if (arch == "GptOssForCausalLM") {
    moe.block.routing = MoeOptions::Routing::TopKSoftmax;
    moe.block.experts = MoeOptions::Experts::ClampedSwiGLU;
    moe.block.router = "router";
    // transformers' GptOssExperts clamps at its constants whatever swiglu_limit says: MoeOptions' defaults
    s.attention.sinks = true;
    s.sliding_layers = c.sliding_layers;
  }
  s.moe = moe;
  return s;
}

MoeForCausalLM::MoeForCausalLM(const MoeConfig& c, Generator& gen) : DecoderForCausalLM(moe_spec(c), gen), config(c) {}

}  // namespace tg::nn
