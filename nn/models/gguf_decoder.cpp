// The GGUF layout the decoder-stack families share (nn/models/detail/gguf_decoder.h).
#include <cmath>
#include <numbers>
#include <utility>

#include "core/error.h"
#include "core/factory.h"
#include "nn/models/detail/gguf_decoder.h"
#include "ops/shape.h"

namespace tg::nn::detail {
namespace {

// transformers' names inside model.layers.{i}. -> llama.cpp's inside blk.{i}.
const std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm", "attn_norm"},
    {"self_attn.q_proj", "attn_q"},       {"self_attn.k_proj", "attn_k"},       {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"},  {"self_attn.qkv_proj", "attn_qkv"},   {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"},  {"pre_feedforward_layernorm", "ffn_norm"},
    {"post_feedforward_layernorm", "post_ffw_norm"},
    {"mlp.gate_proj", "ffn_gate"},        {"mlp.up_proj", "ffn_up"},            {"mlp.down_proj", "ffn_down"},
    {"mlp.gate_up_proj", "ffn_up"},  // Phi-3's fused gate and up: llama.cpp splits ffn_up in halves
    {"mlp.gate", "ffn_gate_inp"},    // a sparse MoE block's router
    {"mlp.router", "ffn_gate_inp"},  // gpt-oss's (with a bias)
};

// llama.cpp's name for parameter `name` ("" when it has none).
std::string tensor_name(const std::string& name, bool sandwich) {
  if (name == "model.embed_tokens.weight") return "token_embd.weight";
  if (name == "model.norm.weight") return "output_norm.weight";
  if (name == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (!name.starts_with(prefix)) return "";
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return "";
  const std::string layer = name.substr(prefix.size(), dot - prefix.size()), rest = name.substr(dot + 1);
  const size_t last = rest.rfind('.');
  if (last == std::string::npos) return "";
  const std::string module = rest.substr(0, last), kind = rest.substr(last);  // ".weight" / ".bias"
  if (rest == "self_attn.sinks") return "blk." + layer + ".attn_sinks.weight";
  // Without sandwich norms the norm after attention is the MLP's input norm.
  if (module == "post_attention_layernorm") return "blk." + layer + (sandwich ? ".post_attention_norm" : ".ffn_norm") + kind;
  for (const auto& [hf, ggml] : kLayerNames)
    if (module == hf) return "blk." + layer + "." + ggml + kind;
  return "";
}

// A sparse block's stacked experts "model.layers.{i}.mlp.experts.<weight>" as llama.cpp's
// blk.{i}.ffn_{gate,up,down}_exps [E, out, in]: gate_up_proj's gate rows, then its up rows (gpt-oss:
// [E, in, out] transposed, gate and up interleaved, and their biases).
void add_experts(GgufModel& out, const DecoderSpec& s, const std::string& name, const Tensor& t) {
  TG_CHECK(s.moe, "save_gguf", s.architecture, " parameter '", name, "' has no llama.cpp tensor");
  const bool oai = s.moe->block.experts == MoeOptions::Experts::ClampedSwiGLU;
  const std::string infix = ".mlp.experts.";
  const std::string layer = name.substr(0, name.find(infix)), weight = name.substr(layer.size() + infix.size());
  const std::string blk = "blk." + layer.substr(layer.rfind('.') + 1) + ".";
  const bool bias = weight.ends_with("_bias");
  const std::string kind = bias ? ".bias" : ".weight";
  if (weight == "gate_up_proj" || weight == "gate_up_proj_bias") {
    const Tensor w = oai && !bias ? transpose(t, 1, 2) : t;
    const int64_t n = w.shape()[1];
    out.tensors.push_back({.name = blk + "ffn_gate_exps" + kind,
                           .source = oai ? slice(w, 1, 0, n, 2) : slice(w, 1, 0, n / 2), .keep_f32 = bias});
    out.tensors.push_back({.name = blk + "ffn_up_exps" + kind,
                           .source = oai ? slice(w, 1, 1, n, 2) : slice(w, 1, n / 2, n), .keep_f32 = bias});
  } else {
    TG_CHECK(weight == "down_proj" || weight == "down_proj_bias", "save_gguf", s.architecture, " parameter '", name,
             "' has no llama.cpp tensor");
    out.tensors.push_back({.name = blk + "ffn_down_exps" + kind, .source = oai && !bias ? transpose(t, 1, 2) : t,
                           .keep_f32 = bias});
  }
}

}  // namespace

GgufModel decoder_gguf(const DecoderForCausalLM& model, const std::string& arch, bool permute_qk) {
  const DecoderSpec& s = model.model->spec;
  GgufModel out;
  out.architecture = arch;
  const bool tied = model.lm_head->weight.same(model.model->embed_tokens->weight);
  for (const auto& [name, t] : model.named_parameters()) {
    if (name == "lm_head.weight" && tied) continue;
    if (name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight")) continue;  // an adapter's (peft/gguf.h)
    if (name.find(".mlp.experts.") != std::string::npos) {
      add_experts(out, s, name, t);
      continue;
    }
    const std::string ggml = tensor_name(name, s.sandwich_norms);
    TG_CHECK(!ggml.empty(), "save_gguf", s.architecture, " parameter '", name, "' has no llama.cpp tensor");
    GgufTensor g{.name = ggml, .source = t};
    const bool norm = ggml.ends_with("norm.weight");
    g.keep_f32 = norm || t.dim() == 1 || ggml.ends_with(".ffn_gate_inp.weight");  // the converter's F32 router
    if (norm && s.unit_offset_norms) g.add = 1.0f;  // transformers' (1 + w), llama.cpp's w
    if (permute_qk && (ggml.find(".attn_q.") != std::string::npos || ggml.find(".attn_k.") != std::string::npos))
      g.rope_head_dim = s.attention.head_dim;
    out.tensors.push_back(std::move(g));
  }
  using gguf::Value;
  auto u32 = [&](const char* key, int64_t v) { out.hparams.set(gguf_key(arch, key), Value::uint32(static_cast<uint32_t>(v))); };
  auto f32 = [&](const char* key, double v) { out.hparams.set(gguf_key(arch, key), Value::float32(static_cast<float>(v))); };
  u32("vocab_size", s.vocab_size);
  u32("context_length", s.max_position_embeddings);
  u32("embedding_length", s.hidden_size);
  u32("block_count", s.num_hidden_layers);
  u32("feed_forward_length", s.intermediate_size);
  u32("attention.head_count", s.num_attention_heads);
  u32("attention.head_count_kv", s.attention.num_kv_heads);
  u32("attention.key_length", s.attention.head_dim);
  u32("attention.value_length", s.attention.head_dim);
  f32("attention.layer_norm_rms_epsilon", s.rms_norm_eps);
  u32("rope.dimension_count", s.rope.scaling.rotary_dim(s.attention.head_dim));
  f32("rope.freq_base", s.rope.theta);
  if (s.moe) {
    u32("expert_count", s.moe->block.num_experts);
    u32("expert_used_count", s.moe->block.top_k);
  }
  return out;
}

void add_rope_scaling(GgufModel& out, const DecoderSpec& spec, bool with_rope_freqs) {
  const RopeScaling& r = spec.rope.scaling;
  const std::string& arch = out.architecture;
  using gguf::Value;
  if (r.rope_type == "default" || r.rope_type == "dynamic") return;
  if (r.rope_type == "linear") {
    out.hparams.set(gguf_key(arch, "rope.scaling.type"), Value::string("linear"));
    out.hparams.set(gguf_key(arch, "rope.scaling.factor"), Value::float32(static_cast<float>(r.factor)));
    return;
  }
  if (r.rope_type == "yarn") {
    out.hparams.set(gguf_key(arch, "rope.scaling.type"), Value::string("yarn"));
    out.hparams.set(gguf_key(arch, "rope.scaling.factor"), Value::float32(static_cast<float>(r.factor)));
    out.hparams.set(gguf_key(arch, "rope.scaling.original_context_length"),
                    Value::uint32(static_cast<uint32_t>(r.original_max_position_embeddings)));
    out.hparams.set(gguf_key(arch, "rope.scaling.yarn_beta_fast"), Value::float32(static_cast<float>(r.beta_fast)));
    out.hparams.set(gguf_key(arch, "rope.scaling.yarn_beta_slow"), Value::float32(static_cast<float>(r.beta_slow)));
    if (r.attention_factor > 0)
      out.hparams.set(gguf_key(arch, "rope.scaling.attn_factor"), Value::float32(static_cast<float>(r.attention_factor)));
    return;
  }
  TG_CHECK(r.rope_type == "llama3" && with_rope_freqs, "save_gguf", spec.architecture, " with rope_type \"", r.rope_type,
           "\": llama.cpp's ", arch, " architecture does not take it");
  // Llama 3.1: each frequency divided by a factor, as llama.cpp's rope_freqs tensor divides it.
  const int64_t dim = r.rotary_dim(spec.attention.head_dim);
  std::vector<float> factors;
  const double low_wavelen = r.original_max_position_embeddings / r.low_freq_factor,
               high_wavelen = r.original_max_position_embeddings / r.high_freq_factor;
  for (int64_t i = 0; i < dim; i += 2) {
    const double wavelen = 2 * std::numbers::pi * std::pow(spec.rope.theta, static_cast<double>(i) / dim);
    if (wavelen < high_wavelen) factors.push_back(1.0f);
    else if (wavelen > low_wavelen) factors.push_back(static_cast<float>(r.factor));
    else {
      const double smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      factors.push_back(static_cast<float>(1 / ((1 - smooth) / r.factor + smooth)));
    }
  }
  out.tensors.push_back({.name = "rope_freqs.weight", .source = from_vector(factors, {static_cast<int64_t>(factors.size())}),
                         .keep_f32 = true});
}

}  // namespace tg::nn::detail
