// A LoRA adapter as llama.cpp's GGUF adapter (convert_lora_to_gguf.py's layout, docs/gguf.md):
// general.type "adapter", adapter.type "lora", adapter.lora.alpha, and per adapted layer
// "<base tensor>.lora_a" [r, in] and ".lora_b" [out, r] with the base model's per-family transforms
// (lora_b's rows reordered as q and k are for llama.cpp's LLaMA RoPE). llama.cpp applies it at run
// time to the base GGUF (`llama-cli -m base.gguf --lora adapter.gguf`) without merging.
//
//   tg::peft::save_adapter_gguf(*model, "adapter.gguf");   // model: wrapped by apply_lora
#pragma once

#include <string>

#include "io/gguf.h"
#include "nn/models/causal_lm.h"

namespace tg::peft {

struct GgufAdapterOptions {
  // F32, F16, BF16 or Q8_0 (lora_b's rows of r values are F16 under Q8_0 unless r is a multiple of 32).
  gguf::TensorType dtype = gguf::TensorType::kF16;
  gguf::Metadata metadata = {};  // more keys (general.name, ...)
};

// tg::Error before anything is written for a model without LoRA layers, merged ones, adapted
// expert weights (peft's target_parameters: llama.cpp's adapters have none), adapters of several
// alphas, trained parameters other than the adapters (modules_to_save, unfrozen norms: a GGUF
// adapter holds only A and B; merge_and_unload and nn::save_gguf instead), or a family
// nn::save_gguf refuses.
void save_adapter_gguf(nn::CausalLM& model, const std::string& path, const GgufAdapterOptions& options = {});

}  // namespace tg::peft
