// SmolLM3 as llama.cpp's converter writes it: the "smollm3" architecture, Llama's layout (q and k
// rows reordered for its RoPE). llama.cpp fixes what config.json says: every 4th layer without RoPE
// and no sliding window, so a SmolLM3 that differs is refused.
#include "core/error.h"
#include "nn/models/detail/gguf_decoder.h"
#include "nn/models/smollm3.h"

namespace tg::nn {

GgufModel smollm3_gguf(const CausalLM& model) {
  const auto* m = dynamic_cast<const SmolLM3ForCausalLM*>(&model);
  TG_CHECK(m, "save_gguf", model.type_name(), " is not a SmolLM3ForCausalLM");
  const SmolLM3Config& c = m->config;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    TG_CHECK(c.uses_rope(i) == ((i + 1) % 4 != 0), "save_gguf", c.architecture, " layer ", i,
             c.uses_rope(i) ? " uses" : " has no", " RoPE: llama.cpp's smollm3 leaves it out of every 4th layer only");
    TG_CHECK(!c.is_sliding(i) || c.sliding_window >= c.max_position_embeddings, "save_gguf", c.architecture, " layer ", i,
             " slides a window of ", c.sliding_window, ": llama.cpp's smollm3 has no sliding window");
  }
  GgufModel out = detail::decoder_gguf(*m, "smollm3", /*permute_qk=*/true);
  detail::add_rope_scaling(out, m->model->spec, /*with_rope_freqs=*/false);
  return out;
}

}  // namespace tg::nn
