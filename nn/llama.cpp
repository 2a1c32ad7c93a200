#include "nn/llama.h"

#include <tuple>

#include "core/activation_checkpoint.h"
#include "core/factory.h"
#include "nn/architecture.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "ops/binary.h"
#include "ops/rms_norm.h"
#include "ops/shape.h"

namespace tg::nn {
namespace {

// The layer's forward_unsummed under tg::checkpoint: its activations are recomputed at backward.
// The checkpoint keeps one tensor a layer, x = residual + delta (rounded as fused_add_rms_norm
// rounds it), not the two: the layer recomputes fused_add_rms_norm(-0, x), whose sum is x bit for
// bit (-0 + v = v for every v) and whose backward gives x the gradient it gives residual and delta
// without checkpointing, which add's backward hands to both unchanged: the same bits, half the
// memory (QLoRA's 8B at 4 x 2048 tokens keeps 2 GiB of checkpoints, not 4).
// position_ids (no gradient) are captured, not passed as an input.
std::pair<Tensor, Tensor> checkpointed(const std::shared_ptr<LlamaDecoderLayer>& layer, const Tensor& residual,
                                       const Tensor& delta, const Tensor& cos, const Tensor& sin,
                                       const Tensor& position_ids) {
  std::vector<Tensor> out;
  if (delta.defined()) {
    auto fn = [layer, position_ids](const std::vector<Tensor>& in) {
      const Tensor minus_zero = full(in[0].shape(), -0.0, in[0].options());
      auto [h, m] = layer->forward_unsummed(in[0], minus_zero, in[1], in[2], nullptr, position_ids);
      return std::vector<Tensor>{h, m};
    };
    out = checkpoint(fn, {add(residual, delta), cos, sin});
  } else {  // the first layer: its input is the embedding alone
    auto fn = [layer, position_ids](const std::vector<Tensor>& in) {
      auto [h, m] = layer->forward_unsummed(in[0], Tensor(), in[1], in[2], nullptr, position_ids);
      return std::vector<Tensor>{h, m};
    };
    out = checkpoint(fn, {residual, cos, sin});
  }
  return {out[0], out[1]};
}

// The final norm of the last layer's h + m (one kernel).
Tensor final_norm(const RMSNorm& norm, const Tensor& h, const Tensor& m) {
  return fused_add_rms_norm(m, h, norm.weight, norm.eps).first;
}

}  // namespace

void LlamaConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    TG_CHECK(v > 0, "LlamaConfig", name, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(max_position_embeddings, "max_position_embeddings");
  TG_CHECK(attention_head_dim >= 0, "LlamaConfig", "head_dim must be >= 0, got ", attention_head_dim);
  TG_CHECK(attention_head_dim > 0 || hidden_size % num_attention_heads == 0, "LlamaConfig", "hidden_size ",
           hidden_size, " is not divisible by num_attention_heads ", num_attention_heads);
  TG_CHECK(sliding_window >= 0, "LlamaConfig", "sliding_window must be >= 0, got ", sliding_window);
  rope_scaling.validate(head_dim());
  TG_CHECK(head_dim() % 2 == 0, "LlamaConfig", "head_dim ", head_dim(), " must be even for rotary embedding");
  TG_CHECK(kv_heads() > 0 && num_attention_heads % kv_heads() == 0, "LlamaConfig", "num_key_value_heads ",
           kv_heads(), " must divide num_attention_heads ", num_attention_heads);
}

int64_t LlamaConfig::num_parameters() const {
  const int64_t d = hidden_size, q = num_attention_heads * head_dim(), kv = kv_heads() * head_dim();
  const bool qkv_biased = attention_bias || qkv_bias;
  const int64_t attn = d * q * 2 + d * kv * 2 + (qkv_biased ? q + 2 * kv : 0) + (attention_bias ? d : 0) +
                       (qk_norm ? 2 * head_dim() : 0);     // q, o [q, d]; k, v [kv, d]
  const int64_t mlp = 3 * d * intermediate_size + (mlp_bias ? 2 * intermediate_size + d : 0);  // gate, up, down
  const int64_t layer = attn + mlp + 2 * d;                // + two RMSNorm weights
  return vocab_size * d * (tie_word_embeddings ? 1 : 2) + num_hidden_layers * layer + d;
}

LlamaConfig LlamaConfig::tiny() { return {}; }

LlamaConfig LlamaConfig::small() {
  LlamaConfig c;
  c.hidden_size = 384;
  c.intermediate_size = 1024;
  c.num_hidden_layers = 6;
  c.num_attention_heads = 6;
  c.max_position_embeddings = 256;
  return c;
}

LlamaConfig LlamaConfig::bench_135m() {
  LlamaConfig c;
  c.vocab_size = 32000;
  c.hidden_size = 768;
  c.intermediate_size = 2048;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 12;
  c.max_position_embeddings = 1024;
  return c;
}

LlamaConfig LlamaConfig::by_name(const std::string& name) {
  if (name == "tiny") return tiny();
  if (name == "small") return small();
  if (name == "bench-135m") return bench_135m();
  fail("LlamaConfig", "unknown config '", name, "' (tiny, small, bench-135m)");
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, Generator& gen) : Module("LlamaDecoderLayer") {
  input_layernorm = std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps);
  const AttentionOptions attention{.num_kv_heads = c.kv_heads(),
                                   .head_dim = c.head_dim(),
                                   .qkv_bias = c.attention_bias || c.qkv_bias,
                                   .o_bias = c.attention_bias,
                                   .qk_norm = c.qk_norm,
                                   .qk_norm_eps = c.rms_norm_eps,
                                   .sliding_window = c.sliding_window};
  self_attn = std::make_shared<CausalSelfAttention>(c.hidden_size, c.num_attention_heads, attention, gen);
  post_attention_layernorm = std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps);
  mlp = std::make_shared<SwiGLUMLP>(c.hidden_size, c.intermediate_size, c.mlp_bias, gen);
  register_module("self_attn", self_attn);
  register_module("mlp", mlp);
  register_module("input_layernorm", input_layernorm);
  register_module("post_attention_layernorm", post_attention_layernorm);
}

Tensor LlamaDecoderLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache,
                                 const Tensor& position_ids) {
  auto [h, m] = forward_unsummed(x, Tensor(), cos, sin, cache, position_ids);
  return add(h, m);
}

std::pair<Tensor, Tensor> LlamaDecoderLayer::forward_unsummed(const Tensor& residual, const Tensor& delta,
                                                              const Tensor& cos, const Tensor& sin,
                                                              const LayerCache* cache, const Tensor& position_ids) {
  Tensor x = residual, n;
  if (delta.defined())
    std::tie(n, x) = fused_add_rms_norm(delta, residual, input_layernorm->weight, input_layernorm->eps);
  else
    n = input_layernorm->forward(residual);
  Tensor a = self_attn->forward(n, cos, sin, cache, position_ids);
  // h = x + a and n = post_attention_layernorm(h) in one pass (one kernel instead of two).
  auto [n2, h] = fused_add_rms_norm(a, x, post_attention_layernorm->weight, post_attention_layernorm->eps);
  return {h, mlp->forward(n2)};
}

LlamaModel::LlamaModel(const LlamaConfig& c, Generator& gen) : Module("LlamaModel"), config(c) {
  c.validate();
  embed_tokens = std::make_shared<Embedding>(c.vocab_size, c.hidden_size, gen);
  layers = std::make_shared<ModuleList<LlamaDecoderLayer>>();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(std::make_shared<LlamaDecoderLayer>(c, gen));
  norm = std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps);
  rotary_emb = std::make_shared<RotaryEmbedding>(c.head_dim(), c.max_position_embeddings, c.rope_theta, c.rope_scaling);
  register_module("embed_tokens", embed_tokens);
  register_module("layers", layers);
  register_module("norm", norm);
  register_module("rotary_emb", rotary_emb);
}

Tensor LlamaModel::forward(const Tensor& ids, const Tensor& position_ids) {
  TG_CHECK(ids.defined() && ids.dim() == 2 && is_integral(ids.dtype()) && ids.dtype() != kBool, "LlamaModel",
           "ids must be [B, T] int32/int64, got ", ids.defined() ? shape_str(ids.shape()) : std::string("undefined"),
           ids.defined() ? std::string(" ") + dtype_name(ids.dtype()) : std::string());
  if (position_ids.defined()) check_position_ids("LlamaModel", ids, position_ids, config.max_position_embeddings);
  Tensor cos, sin;
  std::tie(cos, sin) = position_ids.defined() ? rotary_emb->cos_sin(position_ids, embed_tokens->weight.dtype())
                                              : rotary_emb->cos_sin(ids.shape()[1]);
  Tensor h = embed_tokens->forward(ids), m;  // each layer's output is h + m
  const bool checkpointing = is_gradient_checkpointing() && is_training();
  for (const auto& layer : *layers)
    std::tie(h, m) = checkpointing ? checkpointed(layer, h, m, cos, sin, position_ids)
                                   : layer->forward_unsummed(h, m, cos, sin, nullptr, position_ids);
  return m.defined() ? final_norm(*norm, h, m) : norm->forward(h);
}

Tensor LlamaModel::forward(const Tensor& ids, KVCache& cache) {
  TG_CHECK(ids.defined() && ids.dim() == 2 && is_integral(ids.dtype()) && ids.dtype() != kBool &&
               ids.shape()[0] == cache.batch() && cache.num_layers() == static_cast<int64_t>(layers->size()),
           "LlamaModel", "a cached forward wants ids [", cache.batch(), ", T] int32/int64 for a KVCache of ",
           cache.num_layers(), " layers (the model has ", layers->size(), "), got ",
           ids.defined() ? shape_str(ids.shape()) : std::string("undefined"));
  const int64_t T = ids.shape()[1];
  const CacheStep step = cache.step(T, "LlamaModel");
  auto [cos, sin] = rotary_emb->cos_sin(step, embed_tokens->weight.dtype());
  Tensor h = embed_tokens->forward(ids), m;
  for (size_t i = 0; i < layers->size(); ++i) {
    const LayerCache layer_cache = cache.layer(static_cast<int64_t>(i), step);
    std::tie(h, m) = (*layers)[i].forward_unsummed(h, m, cos, sin, &layer_cache);
  }
  cache.advance(T);
  return m.defined() ? final_norm(*norm, h, m) : norm->forward(h);
}

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& c, Generator& gen) : CausalLM("LlamaForCausalLM"), config(c) {
  {
    init::ReserveDrawsGuard redrawn_below;  // the layers' default init: only its counters are used
    model = std::make_shared<LlamaModel>(c, gen);
    lm_head = std::make_shared<Linear>(c.hidden_size, c.vocab_size, false, gen);
  }
  register_module("model", model);
  register_module("lm_head", lm_head);
  // transformers' _init_weights: every Linear and the embedding ~ N(0, initializer_range),
  // biases zero, norms one; drawn in module order from `gen`.
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

ModelDims LlamaForCausalLM::dims() const {
  return {.vocab_size = config.vocab_size,
          .context = config.max_position_embeddings,
          .num_layers = config.num_hidden_layers,
          .kv_heads = config.kv_heads(),
          .head_dim = config.head_dim(),
          .sliding_window = config.sliding_window};
}

const Architecture& LlamaForCausalLM::architecture() const {
  const Architecture* a = find_architecture(config.architecture);
  TG_CHECK(a, "LlamaForCausalLM", "config.architecture \"", config.architecture, "\" is not registered (",
           architecture_names(), ")");
  return *a;
}

}  // namespace tg::nn
