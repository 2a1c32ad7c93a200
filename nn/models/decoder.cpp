#include "nn/models/decoder.h"

#include <cmath>
#include <tuple>

#include "core/activation_checkpoint.h"
#include "core/bfloat16.h"
#include "core/factory.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "nn/models/architecture.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/rms_norm.h"
#include "ops/unary.h"

namespace tg::nn {
namespace {

using CosSin = std::pair<Tensor, Tensor>;

// {norm(x), x} of x = residual + delta (delta undefined: x = residual): one kernel where the norm
// is a plain RMSNorm (fused_add_rms_norm), the add and Gemma's norm otherwise; {x, x} without a norm.
std::pair<Tensor, Tensor> add_norm(RMSNorm* norm, const Tensor& delta, const Tensor& residual) {
  if (!norm) {
    const Tensor x = delta.defined() ? add(residual, delta) : residual;
    return {x, x};
  }
  if (!delta.defined()) return {norm->forward(residual), residual};
  if (norm->unit_offset) {
    Tensor x = add(residual, delta);
    return {norm->forward(x), x};
  }
  return fused_add_rms_norm(delta, residual, norm->weight, norm->eps);
}

// The layer's forward_unsummed under tg::checkpoint: its activations are recomputed at backward.
// The checkpoint keeps one tensor a layer, x = residual + delta (rounded as fused_add_rms_norm
// rounds it), not the two: the layer recomputes fused_add_rms_norm(-0, x), whose sum is x bit for
// bit (-0 + v = v for every v) and whose backward gives x the gradient it gives residual and delta
// without checkpointing, which add's backward hands to both unchanged: the same bits, half the
// memory (QLoRA's 8B at 4 x 2048 tokens keeps 2 GiB of checkpoints, not 4). A layer whose norm
// adds on its own (Gemma's), or that has no input norm (OLMo 2), recomputes from x alone.
// position_ids (no gradient) are captured, not passed as an input.
std::pair<Tensor, Tensor> checkpointed(const std::shared_ptr<DecoderLayer>& layer, const Tensor& residual,
                                       const Tensor& delta, const Tensor& cos, const Tensor& sin,
                                       const Tensor& position_ids) {
  const RMSNorm* input_norm = layer->input_layernorm.get();
  const bool fused = delta.defined() && input_norm && !input_norm->unit_offset;
  // A sparse layer keeping its router stats returns them too: the load-balancing loss needs them
  // differentiable, and the first run records nothing.
  const bool stats = layer->sparse_mlp && layer->sparse_mlp->keep_router_stats;
  auto fn = [layer, position_ids, fused, stats](const std::vector<Tensor>& in) {
    const Tensor minus_zero = fused ? full(in[0].shape(), -0.0, in[0].options()) : Tensor();
    if (!stats) {
      auto [h, m] = layer->forward_unsummed(in[0], minus_zero, in[1], in[2], nullptr, position_ids);
      return std::vector<Tensor>{h, m};
    }
    SparseMoeBlock& block = *layer->sparse_mlp;
    const bool kept = block.keep_router_stats;  // the recomputation keeps them too, whatever the flag is by then
    block.keep_router_stats = true;
    auto [h, m] = layer->forward_unsummed(in[0], minus_zero, in[1], in[2], nullptr, position_ids);
    block.keep_router_stats = kept;
    return std::vector<Tensor>{h, m, block.stats.probability_sum};
  };
  CheckpointOptions options;
  if (layer->gradient_checkpointing_kwargs().offload_activations) options.offload = {0};  // cos, sin: every layer's
  const std::vector<Tensor> out = checkpoint(fn, {delta.defined() ? add(residual, delta) : residual, cos, sin}, options);
  if (stats) layer->sparse_mlp->stats.probability_sum = out[2];
  return {out[0], out[1]};
}

// transformers multiplies by sqrt(hidden_size) as a tensor of the embeddings' dtype: rounded to it.
double embed_scale(int64_t hidden, DType dtype) {
  const double s = std::sqrt(static_cast<double>(hidden));
  if (dtype == kFloat64) return s;
  if (dtype == kBFloat16) return static_cast<float>(bf16(static_cast<float>(s)));
  return static_cast<float>(s);
}

}  // namespace

bool DecoderSpec::is_sliding(int64_t layer) const {
  if (attention.sliding_window <= 0) return false;
  return sliding_layers.empty() || sliding_layers.at(static_cast<size_t>(layer));
}

bool DecoderSpec::uses_rope(int64_t layer) const {
  return rope_layers.empty() || rope_layers.at(static_cast<size_t>(layer));
}

bool DecoderSpec::is_sparse(int64_t layer) const {
  return moe && (moe->sparse_layers.empty() || moe->sparse_layers.at(static_cast<size_t>(layer)));
}

void DecoderSpec::validate() const {
  TG_CHECK(!architecture.empty() && !family.empty(), "DecoderSpec", "architecture and family must be named");
  check_sizes(*this, "DecoderSpec");
  const int64_t kv = attention.num_kv_heads, hd = attention.head_dim;
  TG_CHECK(kv > 0 && num_attention_heads % kv == 0, "DecoderSpec", "attention.num_kv_heads ", kv,
           " must divide num_attention_heads ", num_attention_heads);
  TG_CHECK(hd > 0 && hd % 2 == 0, "DecoderSpec", "attention.head_dim must be positive and even (RoPE), got ", hd);
  for (const auto& [layers, name] : {std::pair{&sliding_layers, "sliding_layers"}, std::pair{&rope_layers, "rope_layers"}})
    TG_CHECK(layers->empty() || static_cast<int64_t>(layers->size()) == num_hidden_layers, "DecoderSpec", name, " has ",
             layers->size(), " entries for num_hidden_layers ", num_hidden_layers);
  TG_CHECK(pre_norms || sandwich_norms, "DecoderSpec", "a block without pre_norms needs sandwich_norms (its only norms)");
  rope.scaling.validate(hd, max_position_embeddings, rope.theta);
  if (local_rope) local_rope->scaling.validate(hd, max_position_embeddings, local_rope->theta);
  if (!moe) return;
  moe->block.validate(hidden_size);
  TG_CHECK(moe->sparse_layers.empty() || static_cast<int64_t>(moe->sparse_layers.size()) == num_hidden_layers,
           "DecoderSpec", "moe.sparse_layers has ", moe->sparse_layers.size(), " entries for num_hidden_layers ",
           num_hidden_layers);
}

DecoderLayer::DecoderLayer(const DecoderSpec& s, int64_t index, Generator& gen)
    : Module(s.family + "DecoderLayer"), sliding(s.is_sliding(index)), rope(s.uses_rope(index)) {
  // Each norm registered as made, in transformers' order.
  auto rms_norm = [&](const char* name, std::shared_ptr<RMSNorm>& slot) {
    slot = std::make_shared<RMSNorm>(s.hidden_size, s.rms_norm_eps, s.unit_offset_norms);
    register_module(name, slot);
  };
  AttentionOptions attention = s.attention;
  if (!sliding) attention.sliding_window = 0;
  self_attn = std::make_shared<CausalSelfAttention>(s.hidden_size, s.num_attention_heads, attention, gen);
  if (s.is_sparse(index)) sparse_mlp = std::make_shared<SparseMoeBlock>(s.hidden_size, s.moe->block, gen);
  else mlp = std::make_shared<GatedMLP>(s.hidden_size, s.intermediate_size, s.mlp, gen);
  register_module("self_attn", self_attn);
  if (sparse_mlp) register_module("mlp", sparse_mlp);
  else register_module("mlp", mlp);
  if (s.pre_norms) rms_norm("input_layernorm", input_layernorm);
  rms_norm("post_attention_layernorm", post_attention_layernorm);
  if (s.sandwich_norms && s.pre_norms) rms_norm("pre_feedforward_layernorm", pre_feedforward_layernorm);
  if (s.sandwich_norms) rms_norm("post_feedforward_layernorm", post_feedforward_layernorm);
}

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache,
                             const Tensor& position_ids) {
  auto [h, m] = forward_unsummed(x, Tensor(), cos, sin, cache, position_ids);
  return add(h, m);
}

std::pair<Tensor, Tensor> DecoderLayer::forward_unsummed(const Tensor& residual, const Tensor& delta,
                                                         const Tensor& cos, const Tensor& sin,
                                                         const LayerCache* cache, const Tensor& position_ids) {
  auto [n, x] = add_norm(input_layernorm.get(), delta, residual);
  Tensor a = rope ? self_attn->forward(n, cos, sin, cache, position_ids)
                  : self_attn->forward(n, Tensor(), Tensor(), cache, position_ids);
  if (post_feedforward_layernorm) {
    Tensor h = add(x, post_attention_layernorm->forward(a));
    const Tensor f = pre_feedforward_layernorm ? pre_feedforward_layernorm->forward(h) : h;
    return {h, post_feedforward_layernorm->forward(feed_forward(f))};
  }
  // h = x + a and n = post_attention_layernorm(h) in one pass (one kernel instead of two).
  auto [n2, h] = fused_add_rms_norm(a, x, post_attention_layernorm->weight, post_attention_layernorm->eps);
  return {h, feed_forward(n2)};
}

Tensor DecoderLayer::feed_forward(const Tensor& x) { return sparse_mlp ? sparse_mlp->forward(x) : mlp->forward(x); }

DecoderModel::DecoderModel(const DecoderSpec& s, Generator& gen) : Module(s.family + "Model"), spec(s) {
  s.validate();
  embed_tokens = std::make_shared<Embedding>(s.vocab_size, s.hidden_size, gen);
  layers = std::make_shared<ModuleList<DecoderLayer>>();
  for (int64_t i = 0; i < s.num_hidden_layers; ++i) layers->push_back(std::make_shared<DecoderLayer>(s, i, gen));
  norm = std::make_shared<RMSNorm>(s.hidden_size, s.rms_norm_eps, s.unit_offset_norms);
  const int64_t head_dim = s.attention.head_dim, context = s.max_position_embeddings;
  rotary_emb = std::make_shared<RotaryEmbedding>(head_dim, context, s.rope.theta, s.rope.scaling);
  register_module("embed_tokens", embed_tokens);
  register_module("layers", layers);
  register_module("norm", norm);
  register_module("rotary_emb", rotary_emb);
  if (s.local_rope) {
    rotary_emb_local = std::make_shared<RotaryEmbedding>(head_dim, context, s.local_rope->theta, s.local_rope->scaling);
    register_module("rotary_emb_local", rotary_emb_local);
  }
}

Tensor DecoderModel::embed(const Tensor& ids) const {
  Tensor e = embed_tokens->forward(ids);
  return spec.scale_embeddings ? mul(e, embed_scale(spec.hidden_size, e.dtype())) : e;
}

Tensor DecoderModel::forward(const Tensor& ids, const Tensor& position_ids) {
  const char* who = type_name().c_str();
  check_ids(who, ids);
  if (position_ids.defined()) check_position_ids(who, ids, position_ids, spec.max_position_embeddings);
  auto tables = [&](const RotaryEmbedding& rope) {
    return position_ids.defined() ? rope.cos_sin(position_ids, embed_tokens->weight.dtype())
                                  : rope.cos_sin(ids.shape()[1]);
  };
  const CosSin global = tables(*rotary_emb), local = rotary_emb_local ? tables(*rotary_emb_local) : global;
  Tensor h = embed(ids), m;  // each layer's output is h + m
  const bool checkpointing = is_gradient_checkpointing() && is_training();
  for (const auto& layer : *layers) {
    const auto& [cos, sin] = layer->sliding ? local : global;
    std::tie(h, m) = checkpointing ? checkpointed(layer, h, m, cos, sin, position_ids)
                                   : layer->forward_unsummed(h, m, cos, sin, nullptr, position_ids);
  }
  return add_norm(norm.get(), m, h).first;
}

Tensor DecoderModel::forward(const Tensor& ids, KVCache& cache) {
  const char* who = type_name().c_str();
  check_ids(who, ids, cache, static_cast<int64_t>(layers->size()));
  const int64_t T = ids.shape()[1];
  const CacheStep step = cache.step(T, who);
  const DType dt = embed_tokens->weight.dtype();
  const CosSin global = rotary_emb->cos_sin(step, dt), local = rotary_emb_local ? rotary_emb_local->cos_sin(step, dt) : global;
  Tensor h = embed(ids), m;
  for (size_t i = 0; i < layers->size(); ++i) {
    const LayerCache layer_cache = cache.layer(static_cast<int64_t>(i), step);
    DecoderLayer& layer = (*layers)[i];
    const auto& [cos, sin] = layer.sliding ? local : global;
    std::tie(h, m) = layer.forward_unsummed(h, m, cos, sin, &layer_cache);
  }
  cache.advance(T);
  return add_norm(norm.get(), m, h).first;
}

DecoderForCausalLM::DecoderForCausalLM(const DecoderSpec& s, Generator& gen) : CausalLM(s.family + "ForCausalLM") {
  {
    init::ReserveDrawsGuard redrawn_below;  // the layers' default init: only its counters are used
    model = std::make_shared<DecoderModel>(s, gen);
    lm_head = std::make_shared<Linear>(s.hidden_size, s.vocab_size, false, gen);
  }
  register_module("model", model);
  register_module("lm_head", lm_head);
  // The norms stay as they start (one; Gemma's zero, which its 1 + w makes one).
  init_weights(s.initializer_range, s.tie_word_embeddings, gen);
}

Tensor DecoderForCausalLM::logits(const Tensor& hidden) {
  Tensor logits = lm_head->forward(hidden);
  const double cap = model->spec.final_logit_softcapping;
  return cap > 0 ? mul(tanh(div(logits, cap)), cap) : logits;
}

Tensor DecoderForCausalLM::loss(const Tensor& ids, const Tensor& labels, const Tensor& position_ids) {
  const bool aux = model->spec.moe && model->spec.moe->output_router_logits;
  bool kept = false;  // whether the stats were kept before (keep_router_stats by the caller)
  for (const auto& layer : *model->layers) kept = kept || (layer->sparse_mlp && layer->sparse_mlp->keep_router_stats);
  if (aux) keep_router_stats(true);
  const Tensor lm = CausalLM::loss(ids, labels, position_ids);
  if (!aux) return lm;
  if (!kept) keep_router_stats(false);  // the stats of this forward stay
  // transformers' MoE ForCausalLM: loss += router_aux_loss_coef * aux_loss
  return add(lm, tg::to(mul(load_balancing_loss(), model->spec.moe->router_aux_loss_coef), lm.dtype()));
}

void DecoderForCausalLM::keep_router_stats(bool on) {
  for (const auto& layer : *model->layers)
    if (layer->sparse_mlp) layer->sparse_mlp->keep_router_stats = on;
}

Tensor DecoderForCausalLM::load_balancing_loss() const {
  TG_CHECK(model->spec.moe, type_name().c_str(), "has no sparse layers: no load-balancing loss");
  std::vector<const RouterStats*> stats;
  for (const auto& layer : *model->layers)
    if (layer->sparse_mlp) stats.push_back(&layer->sparse_mlp->stats);
  return nn::load_balancing_loss(stats, model->spec.moe->block.num_experts);
}

bool DecoderForCausalLM::logits_are_head_product() const {
  return model->spec.final_logit_softcapping == 0 && CausalLM::logits_are_head_product();
}

ModelDims DecoderForCausalLM::dims() const {
  const DecoderSpec& s = model->spec;
  bool sliding_layers = false;
  for (int64_t i = 0; i < s.num_hidden_layers; ++i) sliding_layers = sliding_layers || s.is_sliding(i);
  return {.vocab_size = s.vocab_size,
          .context = s.max_position_embeddings,
          .num_layers = s.num_hidden_layers,
          .kv_heads = s.attention.num_kv_heads,
          .head_dim = s.attention.head_dim,
          .sliding_window = sliding_layers ? s.attention.sliding_window : 0};
}

const Architecture& DecoderForCausalLM::architecture() const {
  const std::string& name = model->spec.architecture;
  const Architecture* a = find_architecture(name);
  TG_CHECK(a, type_name().c_str(), "config.architecture \"", name, "\" is not registered (", architecture_names(), ")");
  return *a;
}

json::Value DecoderForCausalLM::sized_config_json() const {
  const DecoderSpec& s = model->spec;
  const Architecture& arch = architecture();
  return json::Value::object()
      .set("architectures", json::Value::array({arch.name}))
      .set("model_type", arch.model_type)
      .set("vocab_size", s.vocab_size)
      .set("hidden_size", s.hidden_size)
      .set("intermediate_size", s.intermediate_size)
      .set("num_hidden_layers", s.num_hidden_layers)
      .set("num_attention_heads", s.num_attention_heads)
      .set("num_key_value_heads", s.attention.num_kv_heads)
      .set("head_dim", s.attention.head_dim)
      .set("max_position_embeddings", s.max_position_embeddings)
      .set("initializer_range", s.initializer_range)
      .set("rms_norm_eps", s.rms_norm_eps)
      .set("tie_word_embeddings", s.tie_word_embeddings)
      .set("attention_dropout", 0.0);
}

}  // namespace tg::nn
