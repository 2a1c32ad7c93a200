// Text generation from a byte-level causal LM: greedy (temperature 0) or sampling.
#pragma once

#include <string>

#include "core/generator.h"
#include "nn/llama.h"

namespace examples {

// Continues `prompt` by `new_bytes` bytes. The context is the last max_position_embeddings bytes.
std::string generate(tg::nn::LlamaForCausalLM& model, const std::string& prompt, int new_bytes, double temperature,
                     tg::Generator& gen);

}  // namespace examples
