#include "nn/models/phi3.h"

namespace tg::nn {

DecoderSpec phi3_spec(const LlamaConfig& c) {
  DecoderSpec s = llama_spec(c);
  TG_CHECK(!c.attention_bias && !c.qkv_bias && !c.mlp_bias && !c.qk_norm, "Phi3ForCausalLM",
           "Phi-3 has no biases and no q/k norms (attention_bias, qkv_bias, mlp_bias and qk_norm must be false)");
  // LlamaConfig's default names Llama, whose config.json and names save_pretrained would write.
  if (s.architecture == "LlamaForCausalLM") s.architecture = "Phi3ForCausalLM";
  s.family = "Phi3";
  s.attention.fused_qkv = true;
  s.mlp.fused = true;
  return s;
}

Phi3ForCausalLM::Phi3ForCausalLM(const LlamaConfig& c, Generator& gen)
    : DecoderForCausalLM(phi3_spec(c), gen), config(c) {
  config.architecture = model->spec.architecture;
}

}  // namespace tg::nn
