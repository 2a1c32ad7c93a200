#include "nn/phi3.h"

#include <tuple>

#include "core/activation_checkpoint.h"
#include "nn/architecture.h"
#include "nn/init.h"
#include "ops/binary.h"
#include "ops/rms_norm.h"
#include "ops/shape.h"
#include "ops/silu_mul.h"

namespace tg::nn {
namespace {

void check_ids(const Tensor& ids) {
  TG_CHECK(ids.defined() && ids.dim() == 2 && is_integral(ids.dtype()) && ids.dtype() != kBool, "Phi3Model",
           "ids must be [B, T] int32/int64, got ", ids.defined() ? shape_str(ids.shape()) : std::string("undefined"),
           ids.defined() ? std::string(" ") + dtype_name(ids.dtype()) : std::string());
}

}  // namespace

Phi3Attention::Phi3Attention(const LlamaConfig& c, Generator& gen)
    : Module("Phi3Attention"),
      num_heads(c.num_attention_heads),
      options{.num_kv_heads = c.kv_heads(), .head_dim = c.head_dim(), .sliding_window = c.sliding_window} {
  const int64_t q = num_heads * c.head_dim(), kv = c.kv_heads() * c.head_dim();
  qkv_proj = std::make_shared<Linear>(c.hidden_size, q + 2 * kv, false, gen);
  o_proj = std::make_shared<Linear>(q, c.hidden_size, false, gen);
  register_module("o_proj", o_proj);
  register_module("qkv_proj", qkv_proj);
}

Tensor Phi3Attention::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache,
                              const Tensor& position_ids) {
  const int64_t q = num_heads * options.head_dim, kv = options.num_kv_heads * options.head_dim;
  const std::vector<Tensor> qkv = split(qkv_proj->forward(x), {q, kv, kv}, -1);
  return o_proj->forward(causal_attention(num_heads, options, qkv[0], qkv[1], qkv[2], cos, sin, cache, "Phi3Attention",
                                          nullptr, nullptr, position_ids));
}

Phi3MLP::Phi3MLP(int64_t hidden, int64_t inter, Generator& gen) : Module("Phi3MLP"), intermediate(inter) {
  gate_up_proj = std::make_shared<Linear>(hidden, 2 * inter, false, gen);
  down_proj = std::make_shared<Linear>(inter, hidden, false, gen);
  register_module("gate_up_proj", gate_up_proj);
  register_module("down_proj", down_proj);
}

Tensor Phi3MLP::forward(const Tensor& x) {
  const std::vector<Tensor> gate_up = split(gate_up_proj->forward(x), intermediate, -1);
  return down_proj->forward(silu_mul(gate_up[0], gate_up[1]));
}

Phi3DecoderLayer::Phi3DecoderLayer(const LlamaConfig& c, Generator& gen) : Module("Phi3DecoderLayer") {
  self_attn = std::make_shared<Phi3Attention>(c, gen);
  mlp = std::make_shared<Phi3MLP>(c.hidden_size, c.intermediate_size, gen);
  input_layernorm = std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps);
  post_attention_layernorm = std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps);
  register_module("self_attn", self_attn);
  register_module("mlp", mlp);
  register_module("input_layernorm", input_layernorm);
  register_module("post_attention_layernorm", post_attention_layernorm);
}

Tensor Phi3DecoderLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerCache* cache,
                                const Tensor& position_ids) {
  Tensor a = self_attn->forward(input_layernorm->forward(x), cos, sin, cache, position_ids);
  // h = x + a and its norm in one pass.
  auto [n, h] = fused_add_rms_norm(a, x, post_attention_layernorm->weight, post_attention_layernorm->eps);
  return add(h, mlp->forward(n));
}

Phi3Model::Phi3Model(const LlamaConfig& c, Generator& gen) : Module("Phi3Model"), config(c) {
  c.validate();
  TG_CHECK(!c.attention_bias && !c.qkv_bias && !c.mlp_bias && !c.qk_norm, "Phi3Model",
           "Phi-3 has no biases and no q/k norms (attention_bias, qkv_bias, mlp_bias and qk_norm must be false)");
  embed_tokens = std::make_shared<Embedding>(c.vocab_size, c.hidden_size, gen);
  layers = std::make_shared<ModuleList<Phi3DecoderLayer>>();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(std::make_shared<Phi3DecoderLayer>(c, gen));
  norm = std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps);
  rotary_emb = std::make_shared<RotaryEmbedding>(c.head_dim(), c.max_position_embeddings, c.rope_theta, c.rope_scaling);
  register_module("embed_tokens", embed_tokens);
  register_module("layers", layers);
  register_module("norm", norm);
  register_module("rotary_emb", rotary_emb);
}

Tensor Phi3Model::forward(const Tensor& ids, const Tensor& position_ids) {
  check_ids(ids);
  if (position_ids.defined()) check_position_ids("Phi3Model", ids, position_ids, config.max_position_embeddings);
  Tensor cos, sin;
  std::tie(cos, sin) = position_ids.defined() ? rotary_emb->cos_sin(position_ids, embed_tokens->weight.dtype())
                                              : rotary_emb->cos_sin(ids.shape()[1]);
  Tensor h = embed_tokens->forward(ids);
  const bool checkpointing = is_gradient_checkpointing() && is_training();
  for (const auto& layer : *layers) {
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

Tensor Phi3Model::forward(const Tensor& ids, KVCache& cache) {
  check_ids(ids);
  TG_CHECK(ids.shape()[0] == cache.batch() && cache.num_layers() == static_cast<int64_t>(layers->size()),
           "Phi3Model", "a cached forward wants ids [", cache.batch(), ", T] for a KVCache of ", cache.num_layers(),
           " layers (the model has ", layers->size(), "), got ", shape_str(ids.shape()));
  const int64_t T = ids.shape()[1];
  const CacheStep step = cache.step(T, "Phi3Model");
  auto [cos, sin] = rotary_emb->cos_sin(step, embed_tokens->weight.dtype());
  Tensor h = embed_tokens->forward(ids);
  for (size_t i = 0; i < layers->size(); ++i) {
    const LayerCache layer_cache = cache.layer(static_cast<int64_t>(i), step);
    h = (*layers)[i].forward(h, cos, sin, &layer_cache);
  }
  cache.advance(T);
  return norm->forward(h);
}

Phi3ForCausalLM::Phi3ForCausalLM(const LlamaConfig& c, Generator& gen) : CausalLM("Phi3ForCausalLM"), config(c) {
  // LlamaConfig's default names Llama, whose config.json and names save_pretrained would write.
  if (config.architecture == "LlamaForCausalLM") config.architecture = "Phi3ForCausalLM";
  {
    init::ReserveDrawsGuard redrawn_below;  // the layers' default init: only its counters are used
    model = std::make_shared<Phi3Model>(c, gen);
    lm_head = std::make_shared<Linear>(c.hidden_size, c.vocab_size, false, gen);
  }
  register_module("model", model);
  register_module("lm_head", lm_head);
  // transformers' _init_weights, as LlamaForCausalLM's.
  for (auto& [name, m] : named_modules()) {
    if (auto* lin = dynamic_cast<Linear*>(m)) {
      if (c.tie_word_embeddings && lin == lm_head.get()) init::reserve_draw(lin->weight, gen);  // tied below
      else init::normal_(lin->weight, 0.0, c.initializer_range, gen);
    } else if (auto* emb = dynamic_cast<Embedding*>(m)) {
      init::normal_(emb->weight, 0.0, c.initializer_range, gen);
    }
  }
  if (c.tie_word_embeddings) lm_head->weight = model->embed_tokens->weight;
}

ModelDims Phi3ForCausalLM::dims() const {
  return {.vocab_size = config.vocab_size,
          .context = config.max_position_embeddings,
          .num_layers = config.num_hidden_layers,
          .kv_heads = config.kv_heads(),
          .head_dim = config.head_dim(),
          .sliding_window = config.sliding_window};
}

const Architecture& Phi3ForCausalLM::architecture() const {
  const Architecture* a = find_architecture(config.architecture);
  TG_CHECK(a, "Phi3ForCausalLM", "config.architecture \"", config.architecture, "\" is not registered (",
           architecture_names(), ")");
  return *a;
}

}  // namespace tg::nn
