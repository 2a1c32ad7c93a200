// Text generation from a byte-level causal LM: greedy (temperature 0) or sampling.
#pragma once

#include <string>

#include "core/generator.h"
#include "nn/llama.h"

namespace examples {

// Continues `prompt` by `new_bytes` bytes. The context is the last max_position_embeddings bytes.
// temperature 0 is greedy; otherwise sampling from softmax(logits / temperature), restricted to
// the top_k most likely bytes when top_k > 0 (as transformers' generate).
std::string generate(tg::nn::LlamaForCausalLM& model, const std::string& prompt, int new_bytes, double temperature,
                     tg::Generator& gen, int top_k = 0);

// The text as one printable line: newlines as \n, other control or non-ASCII bytes as \xNN
// (a byte-level model can sample any byte).
std::string printable(const std::string& text);

}  // namespace examples
