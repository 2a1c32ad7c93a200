#include "nn/gemma.h"

#include <cmath>

#include "core/activation_checkpoint.h"
#include "core/bfloat16.h"
#include "nn/architecture.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "ops/binary.h"
#include "ops/unary.h"

namespace tg::nn {
namespace {

// transformers multiplies by sqrt(hidden_size) as a tensor of the embeddings' dtype: rounded to it.
double embed_scale(int64_t hidden, DType dtype) {
  const double s = std::sqrt(static_cast<double>(hidden));
  if (dtype == kFloat64) return s;
  if (dtype == kBFloat16) return static_cast<float>(bf16(static_cast<float>(s)));
  return static_cast<float>(s);
}

void check_ids(const Tensor& ids) {
  TG_CHECK(ids.defined() && ids.dim() == 2 && is_integral(ids.dtype()) && ids.dtype() != kBool, "GemmaModel",
           "ids must be [B, T] int32/int64, got ", ids.defined() ? shape_str(ids.shape()) : std::string("undefined"),
           ids.defined() ? std::string(" ") + dtype_name(ids.dtype()) : std::string());
}

}  // namespace

bool GemmaConfig::is_sliding(int64_t layer) const {
  return layer_types.empty() ? layer % 2 == 0 : layer_types.at(static_cast<size_t>(layer)) == "sliding_attention";
}

void GemmaConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    TG_CHECK(v > 0, "GemmaConfig", name, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(max_position_embeddings, "max_position_embeddings");
  TG_CHECK(num_attention_heads % num_key_value_heads == 0, "GemmaConfig", "num_key_value_heads ",
           num_key_value_heads, " must divide num_attention_heads ", num_attention_heads);
  TG_CHECK(head_dim % 2 == 0, "GemmaConfig", "head_dim ", head_dim, " must be even for rotary embedding");
  TG_CHECK(std::isfinite(query_pre_attn_scalar) && query_pre_attn_scalar > 0, "GemmaConfig",
           "query_pre_attn_scalar must be a positive number, got ", query_pre_attn_scalar);
  TG_CHECK(std::isfinite(attn_logit_softcapping) && attn_logit_softcapping >= 0, "GemmaConfig",
           "attn_logit_softcapping must be >= 0 (0: none), got ", attn_logit_softcapping);
  TG_CHECK(std::isfinite(final_logit_softcapping) && final_logit_softcapping >= 0, "GemmaConfig",
           "final_logit_softcapping must be >= 0 (0: none), got ", final_logit_softcapping);
  TG_CHECK(layer_types.empty() || static_cast<int64_t>(layer_types.size()) == num_hidden_layers, "GemmaConfig",
           "layer_types has ", layer_types.size(), " entries for num_hidden_layers ", num_hidden_layers);
  for (const std::string& t : layer_types)
    TG_CHECK(t == "sliding_attention" || t == "full_attention", "GemmaConfig", "layer_types entry \"", t,
             "\" is neither \"sliding_attention\" nor \"full_attention\"");
  for (int64_t i = 0; i < num_hidden_layers; ++i)
    TG_CHECK(!is_sliding(i) || sliding_window > 0, "GemmaConfig", "layer ", i,
             " is a sliding_attention layer, so sliding_window must be positive, got ", sliding_window);
  rope_scaling.validate(head_dim);
  rope_local_scaling.validate(head_dim);
}

GemmaMLP::GemmaMLP(int64_t hidden, int64_t intermediate, Generator& gen) : Module("GemmaMLP") {
  gate_proj = std::make_shared<Linear>(hidden, intermediate, false, gen);
  up_proj = std::make_shared<Linear>(hidden, intermediate, false, gen);
  down_proj = std::make_shared<Linear>(intermediate, hidden, false, gen);
  register_module("gate_proj", gate_proj);
  register_module("up_proj", up_proj);
  register_module("down_proj", down_proj);
}

Tensor GemmaMLP::forward(const Tensor& x) {
  const std::vector<Tensor> gate_up = forward_group({gate_proj, up_proj}, x);  // one op for the two
  return down_proj->forward(mul(gelu(gate_up[0], "tanh"), gate_up[1]));
}

GemmaDecoderLayer::GemmaDecoderLayer(const GemmaConfig& c, int64_t index, Generator& gen)
    : Module("GemmaDecoderLayer"), sliding(c.is_sliding(index)) {
  auto norm = [&] { return std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, /*unit_offset=*/true); };
  const AttentionOptions attention{.num_kv_heads = c.num_key_value_heads,
                                   .head_dim = c.head_dim,
                                   .qkv_bias = c.attention_bias,
                                   .o_bias = c.attention_bias,
                                   .qk_norm = c.qk_norm,
                                   .qk_norm_eps = c.rms_norm_eps,
                                   .sliding_window = sliding ? c.sliding_window : 0,
                                   .scale = 1.0 / std::sqrt(c.query_pre_attn_scalar),
                                   .softcap = c.attn_logit_softcapping,
                                   .qk_norm_unit_offset = true};
  self_attn = std::make_shared<CausalSelfAttention>(c.hidden_size, c.num_attention_heads, attention, gen);
  mlp = std::make_shared<GemmaMLP>(c.hidden_size, c.intermediate_size, gen);
  input_layernorm = norm();
  post_attention_layernorm = norm();
  pre_feedforward_layernorm = norm();
  post_feedforward_layernorm = norm();
  register_module("self_attn", self_attn);
  register_module("mlp", mlp);
  register_module("input_layernorm", input_layernorm);
  register_module("post_attention_layernorm", post_attention_layernorm);
  register_module("pre_feedforward_layernorm", pre_feedforward_layernorm);
  register_module("post_feedforward_layernorm", post_feedforward_layernorm);
}

Tensor GemmaDecoderLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache,
                                 const Tensor& position_ids) {
  Tensor a = self_attn->forward(input_layernorm->forward(x), cos, sin, cache, position_ids);
  Tensor h = add(x, post_attention_layernorm->forward(a));
  return add(h, post_feedforward_layernorm->forward(mlp->forward(pre_feedforward_layernorm->forward(h))));
}

GemmaModel::GemmaModel(const GemmaConfig& c, Generator& gen) : Module("GemmaModel"), config(c) {
  c.validate();
  embed_tokens = std::make_shared<Embedding>(c.vocab_size, c.hidden_size, gen);
  layers = std::make_shared<ModuleList<GemmaDecoderLayer>>();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(std::make_shared<GemmaDecoderLayer>(c, i, gen));
  norm = std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, /*unit_offset=*/true);
  rotary_emb = std::make_shared<RotaryEmbedding>(c.head_dim, c.max_position_embeddings, c.rope_theta, c.rope_scaling);
  rotary_emb_local = std::make_shared<RotaryEmbedding>(c.head_dim, c.max_position_embeddings, c.rope_local_base_freq,
                                                       c.rope_local_scaling);
  register_module("embed_tokens", embed_tokens);
  register_module("layers", layers);
  register_module("norm", norm);
  register_module("rotary_emb", rotary_emb);
  register_module("rotary_emb_local", rotary_emb_local);
}

Tensor GemmaModel::embed(const Tensor& ids) const {
  Tensor e = embed_tokens->forward(ids);
  return mul(e, embed_scale(config.hidden_size, e.dtype()));
}

Tensor GemmaModel::forward(const Tensor& ids, const Tensor& position_ids) {
  check_ids(ids);
  const int64_t T = ids.shape()[1];
  std::pair<Tensor, Tensor> global, local;
  if (position_ids.defined()) {
    check_position_ids("GemmaModel", ids, position_ids, config.max_position_embeddings);
    const DType dt = embed_tokens->weight.dtype();
    global = rotary_emb->cos_sin(position_ids, dt), local = rotary_emb_local->cos_sin(position_ids, dt);
  } else {
    global = rotary_emb->cos_sin(T), local = rotary_emb_local->cos_sin(T);
  }
  Tensor h = embed(ids);
  const bool checkpointing = is_gradient_checkpointing() && is_training();
  for (const auto& layer : *layers) {
    const auto& [cos, sin] = layer->sliding ? local : global;
    if (checkpointing) {
      // The layer's activations are recomputed at backward.
      auto fn = [layer, position_ids](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{layer->forward(in[0], in[1], in[2], nullptr, position_ids)};
      };
      h = checkpoint(fn, {h, cos, sin})[0];
    } else {
      h = layer->forward(h, cos, sin, nullptr, position_ids);
    }
  }
  return norm->forward(h);
}

Tensor GemmaModel::forward(const Tensor& ids, KVCache& cache) {
  check_ids(ids);
  TG_CHECK(ids.shape()[0] == cache.batch() && cache.num_layers() == static_cast<int64_t>(layers->size()),
           "GemmaModel", "a cached forward wants ids [", cache.batch(), ", T] for a KVCache of ", cache.num_layers(),
           " layers (the model has ", layers->size(), "), got ", shape_str(ids.shape()));
  const int64_t T = ids.shape()[1];
  const CacheStep step = cache.step(T, "GemmaModel");
  const DType dt = embed_tokens->weight.dtype();
  const std::pair<Tensor, Tensor> global = rotary_emb->cos_sin(step, dt), local = rotary_emb_local->cos_sin(step, dt);
  Tensor h = embed(ids);
  for (size_t i = 0; i < layers->size(); ++i) {
    const LayerCache layer_cache = cache.layer(static_cast<int64_t>(i), step);
    GemmaDecoderLayer& layer = (*layers)[i];
    const auto& [cos, sin] = layer.sliding ? local : global;
    h = layer.forward(h, cos, sin, &layer_cache);
  }
  cache.advance(T);
  return norm->forward(h);
}

GemmaForCausalLM::GemmaForCausalLM(const GemmaConfig& c, Generator& gen) : CausalLM("GemmaForCausalLM"), config(c) {
  {
    init::ReserveDrawsGuard redrawn_below;  // the layers' default init: only its counters are used
    model = std::make_shared<GemmaModel>(c, gen);
    lm_head = std::make_shared<Linear>(c.hidden_size, c.vocab_size, false, gen);
  }
  register_module("model", model);
  register_module("lm_head", lm_head);
  // transformers' _init_weights: Linear and embedding weights ~ N(0, initializer_range), biases zero
  // (the norms' weights start at zero, which Gemma's 1 + w makes one).
  for (auto& [name, m] : named_modules()) {
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      if (c.tie_word_embeddings && lin == lm_head.get()) init::reserve_draw(lin->weight, gen);  // tied below
      else init::normal_(lin->weight, 0.0, c.initializer_range, gen);
      if (lin->bias.defined()) init::zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<Embedding*>(m)) {
      init::normal_(emb->weight, 0.0, c.initializer_range, gen);
    }
  }
  if (c.tie_word_embeddings) lm_head->weight = model->embed_tokens->weight;
}

Tensor GemmaForCausalLM::logits(const Tensor& hidden) {
  Tensor logits = lm_head->forward(hidden);
  const double cap = config.final_logit_softcapping;
  return cap > 0 ? mul(tanh(div(logits, cap)), cap) : logits;
}

Tensor GemmaForCausalLM::loss(const Tensor& ids, const Tensor& labels, const Tensor& position_ids) {
  if (config.final_logit_softcapping > 0) return causal_lm_loss(logits(hidden_states(ids, position_ids)), labels);
  return CausalLM::loss(ids, labels, position_ids);
}

ModelDims GemmaForCausalLM::dims() const {
  bool sliding_layers = false;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) sliding_layers = sliding_layers || config.is_sliding(i);
  return {.vocab_size = config.vocab_size,
          .context = config.max_position_embeddings,
          .num_layers = config.num_hidden_layers,
          .kv_heads = config.num_key_value_heads,
          .head_dim = config.head_dim,
          .sliding_window = sliding_layers ? config.sliding_window : 0};
}

const Architecture& GemmaForCausalLM::architecture() const {
  const Architecture* a = find_architecture(config.architecture);
  TG_CHECK(a, "GemmaForCausalLM", "config.architecture \"", config.architecture, "\" is not registered (",
           architecture_names(), ")");
  return *a;
}

}  // namespace tg::nn
