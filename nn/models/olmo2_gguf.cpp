// OLMo 2 as llama.cpp's converter writes it: the "olmo2" architecture (transformers' RoPE halves,
// so no reordering), the norms after attention and MLP as post_attention_norm / post_ffw_norm, the
// whole-projection q/k norms. llama.cpp's olmo2 loads no biases and always an output matrix.
#include "core/error.h"
#include "nn/models/detail/gguf_decoder.h"
#include "nn/models/olmo2.h"

namespace tg::nn {

GgufModel olmo2_gguf(const CausalLM& model) {
  const auto* m = dynamic_cast<const Olmo2ForCausalLM*>(&model);
  TG_CHECK(m, "save_gguf", model.type_name(), " is not an Olmo2ForCausalLM");
  const LlamaConfig& c = m->config;
  TG_CHECK(!c.attention_bias, "save_gguf", c.architecture,
           " with attention_bias true: llama.cpp's olmo2 architecture has no attention biases");
  TG_CHECK(!c.tie_word_embeddings, "save_gguf", c.architecture,
           " with tie_word_embeddings true: llama.cpp's olmo2 architecture needs its own output matrix");
  GgufModel out = detail::decoder_gguf(*m, "olmo2", /*permute_qk=*/false);
  detail::add_rope_scaling(out, m->model->spec, /*with_rope_freqs=*/false);
  return out;
}

}  // namespace tg::nn
