// Llama, Mistral, Qwen2 and Qwen3 as llama.cpp's converter writes them to GGUF: the "llama"
// architecture (q and k rows reordered for its RoPE, Llama 3.1's rope_freqs), "qwen2", "qwen3".
#include "core/error.h"
#include "nn/models/detail/gguf_decoder.h"
#include "nn/models/llama.h"

namespace tg::nn {
namespace {

const LlamaForCausalLM& llama_of(const CausalLM& model) {
  const auto* m = dynamic_cast<const LlamaForCausalLM*>(&model);
  TG_CHECK(m, "save_gguf", model.type_name(), " is not a LlamaForCausalLM");
  return *m;
}

}  // namespace

namespace detail {

GgufModel llama_architecture_gguf(const DecoderForCausalLM& model, const LlamaConfig& c) {
  GgufModel out = decoder_gguf(model, "llama", /*permute_qk=*/true);
  add_rope_scaling(out, model.model->spec, /*with_rope_freqs=*/true);
  // Mistral v0.1's window: llama.cpp's llama attends to every key, so the file's context is the
  // window, within which both compute the same.
  if (c.sliding_window > 0 && c.sliding_window < c.max_position_embeddings)
    out.hparams.set("llama.context_length", gguf::Value::uint32(static_cast<uint32_t>(c.sliding_window)));
  return out;
}

}  // namespace detail

GgufModel llama_gguf(const CausalLM& model) {
  const LlamaForCausalLM& m = llama_of(model);
  return detail::llama_architecture_gguf(m, m.config);
}

GgufModel qwen2_gguf(const CausalLM& model) {
  const LlamaForCausalLM& m = llama_of(model);
  GgufModel out = detail::decoder_gguf(m, "qwen2", /*permute_qk=*/false);
  detail::add_rope_scaling(out, m.model->spec, /*with_rope_freqs=*/false);
  return out;
}

GgufModel qwen3_gguf(const CausalLM& model) {
  const LlamaForCausalLM& m = llama_of(model);
  GgufModel out = detail::decoder_gguf(m, "qwen3", /*permute_qk=*/false);
  detail::add_rope_scaling(out, m.model->spec, /*with_rope_freqs=*/false);
  return out;
}

}  // namespace tg::nn
