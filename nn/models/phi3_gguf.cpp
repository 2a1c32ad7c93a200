// Phi-3 / Phi-3.5 as llama.cpp's converter writes them to GGUF ("phi3"): qkv_proj and gate_up_proj
// kept fused (attn_qkv, ffn_up), the window, LongRoPE's factor tensors and attention factor.
#include <cmath>

#include "core/error.h"
#include "core/factory.h"
#include "nn/models/detail/gguf_decoder.h"
#include "nn/models/phi3.h"

namespace tg::nn {

GgufModel phi3_gguf(const CausalLM& model) {
  const auto* m = dynamic_cast<const Phi3ForCausalLM*>(&model);
  TG_CHECK(m, "save_gguf", model.type_name(), " is not a Phi3ForCausalLM");
  const LlamaConfig& c = m->config;
  const RopeScaling& r = c.rope_scaling;
  GgufModel out = detail::decoder_gguf(*m, "phi3", /*permute_qk=*/false);
  using gguf::Value;
  out.hparams.set("phi3.attention.sliding_window", Value::uint32(static_cast<uint32_t>(c.sliding_window)));
  const bool long_rope = r.rope_type == "longrope";
  out.hparams.set("phi3.rope.scaling.original_context_length",
                  Value::uint32(static_cast<uint32_t>(long_rope ? r.original_max_position_embeddings : c.max_position_embeddings)));
  if (!long_rope) {
    detail::add_rope_scaling(out, m->model->spec, /*with_rope_freqs=*/false);
    return out;
  }
  // llama.cpp divides by the long factors when its context passes the original one, by the
  // short ones otherwise (transformers: when the sequence does), and scales cos and sin so.
  const double scale = static_cast<double>(c.max_position_embeddings) / r.original_max_position_embeddings;
  const double attn_factor = r.attention_factor > 0 ? r.attention_factor
                             : scale > 1 ? std::sqrt(1 + std::log(scale) / std::log(r.original_max_position_embeddings))
                                         : 1.0;
  out.hparams.set("phi3.rope.scaling.attn_factor", Value::float32(static_cast<float>(attn_factor)));
  auto factors = [](const std::vector<double>& f) {
    std::vector<float> v(f.begin(), f.end());
    return from_vector(v, {static_cast<int64_t>(v.size())});
  };
  out.tensors.push_back({.name = "rope_factors_long.weight", .source = factors(r.long_factor), .keep_f32 = true});
  out.tensors.push_back({.name = "rope_factors_short.weight", .source = factors(r.short_factor), .keep_f32 = true});
  return out;
}

}  // namespace tg::nn
