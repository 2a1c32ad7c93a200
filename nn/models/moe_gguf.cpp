// Qwen3-MoE, Mixtral and gpt-oss as llama.cpp's converter writes them to GGUF: "qwen3moe" (Qwen3's
// layout, expert_feed_forward_length), "llama" with experts (Mixtral: q and k rows reordered as
// Llama's) and "gpt-oss" (sinks, biases, the experts dequantised as the converter writes them).
#include <string>

#include "core/error.h"
#include "nn/models/detail/gguf_decoder.h"
#include "nn/models/moe_lm.h"

namespace tg::nn {
namespace {

const MoeForCausalLM& moe_of(const CausalLM& model) {
  const auto* m = dynamic_cast<const MoeForCausalLM*>(&model);
  TG_CHECK(m, "save_gguf", model.type_name(), " is not a MoeForCausalLM");
  return *m;
}

}  // namespace

GgufModel qwen3_moe_gguf(const CausalLM& model) {
  const MoeForCausalLM& m = moe_of(model);
  const MoeConfig& c = m.config;
  // llama.cpp's qwen3moe renormalises the top-k weights and routes every layer, whatever the file says.
  TG_CHECK(c.norm_topk_prob, "save_gguf", "Qwen3MoeForCausalLM with norm_topk_prob false: llama.cpp's qwen3moe ",
           "always renormalises the chosen experts' weights (no GGUF key turns it off)");
  for (int64_t layer = 0; layer < c.base.num_hidden_layers; ++layer)
    TG_CHECK(c.is_sparse(layer), "save_gguf", "Qwen3MoeForCausalLM layer ", layer, " is dense (mlp_only_layers, ",
             "decoder_sparse_step ", c.decoder_sparse_step, "): llama.cpp's qwen3moe wants experts in every layer");
  GgufModel out = detail::decoder_gguf(m, "qwen3moe", /*permute_qk=*/false);
  detail::add_rope_scaling(out, m.model->spec, /*with_rope_freqs=*/false);
  out.hparams.set("qwen3moe.expert_feed_forward_length",
                  gguf::Value::uint32(static_cast<uint32_t>(c.expert_intermediate_size())));
  return out;
}

GgufModel mixtral_gguf(const CausalLM& model) {
  const MoeForCausalLM& m = moe_of(model);
  return detail::llama_architecture_gguf(m, m.config.base);
}

GgufModel gpt_oss_gguf(const CausalLM& model) {
  const MoeForCausalLM& m = moe_of(model);
  const MoeConfig& c = m.config;
  // llama.cpp's gpt-oss slides every other layer from the first (its SwiGLU's alpha 1.702 and
  // limit 7 are the model's whatever config.json says, as transformers').
  for (int64_t layer = 0; layer < c.base.num_hidden_layers; ++layer)
    TG_CHECK(c.sliding_layers[static_cast<size_t>(layer)] == (layer % 2 == 0), "save_gguf", "GptOssForCausalLM layer ",
             layer, (layer % 2 == 0 ? " is full" : " slides"), " (layer_types): llama.cpp's gpt-oss slides the even layers only");
  GgufModel out = detail::decoder_gguf(m, "gpt-oss", /*permute_qk=*/false);
  detail::add_rope_scaling(out, m.model->spec, /*with_rope_freqs=*/false);
  const std::string ffn_norm = ".ffn_norm.weight";  // the MLP's input norm: gpt-oss's post_attention_norm
  for (GgufTensor& t : out.tensors)
    if (t.name.ends_with(ffn_norm)) t.name = t.name.substr(0, t.name.size() - ffn_norm.size()) + ".post_attention_norm.weight";
  using gguf::Value;
  out.hparams.set("gpt-oss.expert_feed_forward_length", Value::uint32(static_cast<uint32_t>(c.expert_intermediate_size())));
  out.hparams.set("gpt-oss.attention.sliding_window", Value::uint32(static_cast<uint32_t>(c.base.sliding_window)));
  return out;
}

}  // namespace tg::nn
