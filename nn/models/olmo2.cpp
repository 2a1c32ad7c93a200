#include "nn/models/olmo2.h"

namespace tg::nn {

DecoderSpec olmo2_spec(const LlamaConfig& c) {
  DecoderSpec s = llama_spec(c);
  TG_CHECK(!c.qkv_bias && !c.mlp_bias && !c.qk_norm && c.sliding_window == 0, "Olmo2ForCausalLM",
           "OLMo 2 has no q/k/v-only or MLP biases, its own q/k norms and no sliding window (qkv_bias, mlp_bias and "
           "qk_norm must be false, sliding_window 0)");
  // LlamaConfig's default names Llama, whose config.json and names save_pretrained would write.
  if (s.architecture == "LlamaForCausalLM") s.architecture = "Olmo2ForCausalLM";
  s.family = "Olmo2";
  s.attention.qk_norm = s.attention.qk_norm_whole = true;
  s.pre_norms = false;
  s.sandwich_norms = true;
  return s;
}

Olmo2ForCausalLM::Olmo2ForCausalLM(const LlamaConfig& c, Generator& gen)
    : DecoderForCausalLM(olmo2_spec(c), gen), config(c) {
  config.architecture = model->spec.architecture;
}

}  // namespace tg::nn
