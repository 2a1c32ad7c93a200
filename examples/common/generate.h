// Text generation from a causal LM: greedy (temperature 0) or sampling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/generator.h"
#include "nn/llama.h"

namespace examples {

// Continues `prompt` (token ids) by `new_tokens` ids from `model` (ids [1, T] -> logits [1, T, V]
// on `device`); the context is the last `context` ids. temperature 0 is greedy; otherwise
// sampling from softmax(logits / temperature), restricted to the top_k most likely tokens when
// top_k > 0 (as transformers' generate). Returns the new ids.
std::vector<int64_t> generate_ids(tg::nn::Module& model, std::vector<int64_t> prompt, int new_tokens, int64_t context,
                                  tg::Device device, double temperature, tg::Generator& gen, int top_k = 0);

// A byte-level model (the toy transformer): continues `prompt` by `new_bytes` bytes, the context
// its max_position_embeddings.
std::string generate(tg::nn::LlamaForCausalLM& model, const std::string& prompt, int new_bytes, double temperature,
                     tg::Generator& gen, int top_k = 0);

// The text as one printable line: newlines as \n, other control bytes and bytes that are not
// part of a UTF-8 character as \xNN (a byte-level model can sample any byte).
std::string printable(const std::string& text);

}  // namespace examples
