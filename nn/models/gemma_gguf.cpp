// Gemma 2 and Gemma 3 as llama.cpp's converter writes them to GGUF ("gemma2", "gemma3"): norm
// weights + 1 (transformers computes 1 + w, llama.cpp w), the head tied to token_embd, the
// window, soft-capping. llama.cpp fixes what transformers reads from config.json (the scores'
// scale, which layers slide, Gemma 3's local RoPE base): a config that differs is refused by name.
#include <cmath>

#include "core/error.h"
#include "nn/models/detail/gguf_decoder.h"
#include "nn/models/gemma.h"

namespace tg::nn {
namespace {

// The checks and keys both share; `pattern`: llama.cpp's sliding layers (every pattern-th global),
// `big`: the layer count of the size whose scale llama.cpp takes from hidden / heads (the 27B).
GgufModel gemma_gguf(const CausalLM& model, const std::string& arch, int64_t pattern, int64_t big) {
  const auto* m = dynamic_cast<const GemmaForCausalLM*>(&model);
  TG_CHECK(m, "save_gguf", model.type_name(), " is not a GemmaForCausalLM");
  const GemmaConfig& c = m->config;
  TG_CHECK(c.tie_word_embeddings, "save_gguf", c.architecture, " with tie_word_embeddings false: llama.cpp's ", arch,
           " takes the head from token_embd");
  const double scalar = c.num_hidden_layers == big ? static_cast<double>(c.hidden_size / c.num_attention_heads)
                                                   : static_cast<double>(c.head_dim);
  TG_CHECK(c.query_pre_attn_scalar == scalar, "save_gguf", c.architecture, " query_pre_attn_scalar ",
           c.query_pre_attn_scalar, ": llama.cpp's ", arch, " scales the scores by 1/sqrt(", scalar, ") at ",
           c.num_hidden_layers, " layers");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    TG_CHECK(c.is_sliding(i) == ((i + 1) % pattern != 0), "save_gguf", c.architecture, " layer ", i, " is ",
             c.is_sliding(i) ? "sliding" : "global", ": llama.cpp's ", arch, " makes every ", pattern,
             "th layer global and the others sliding (layer_types)");
  GgufModel out = detail::decoder_gguf(*m, arch, /*permute_qk=*/false);
  out.hparams.set(detail::gguf_key(arch, "attention.sliding_window"),
                  gguf::Value::uint32(static_cast<uint32_t>(c.sliding_window)));
  if (c.final_logit_softcapping > 0)
    out.hparams.set(detail::gguf_key(arch, "final_logit_softcapping"),
                    gguf::Value::float32(static_cast<float>(c.final_logit_softcapping)));
  detail::add_rope_scaling(out, m->model->spec, /*with_rope_freqs=*/false);
  return out;
}

}  // namespace

GgufModel gemma2_gguf(const CausalLM& model) {
  GgufModel out = gemma_gguf(model, "gemma2", 2, 46);
  const GemmaConfig& c = dynamic_cast<const GemmaForCausalLM&>(model).config;
  if (c.attn_logit_softcapping > 0)
    out.hparams.set("gemma2.attn_logit_softcapping", gguf::Value::float32(static_cast<float>(c.attn_logit_softcapping)));
  return out;
}

GgufModel gemma3_gguf(const CausalLM& model) {
  GgufModel out = gemma_gguf(model, "gemma3", 6, 62);
  const GemmaConfig& c = dynamic_cast<const GemmaForCausalLM&>(model).config;
  TG_CHECK(c.attn_logit_softcapping == 0, "save_gguf", c.architecture, " attn_logit_softcapping ",
           c.attn_logit_softcapping, ": llama.cpp's gemma3 has none");
  TG_CHECK(c.rope_local_base_freq == 10000.0 && c.rope_local_scaling.rope_type == "default", "save_gguf", c.architecture,
           " sliding layers' RoPE (rope_local_base_freq ", c.rope_local_base_freq, ", ", c.rope_local_scaling.rope_type,
           "): llama.cpp's gemma3 rotates them with base 10000, unscaled");
  out.hparams.set("gemma3.rope.freq_base_swa", gguf::Value::float32(10000.0f));
  return out;
}

}  // namespace tg::nn
