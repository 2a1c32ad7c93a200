// Model configs the tests share.
#pragma once

#include "nn/llama.h"

namespace tg::test {

// The smallest Llama that still has every part: 13 tokens, hidden 8, one layer of 2 heads, 4
// positions (fast enough for saves, loads and fuzzed inputs in a loop).
inline nn::LlamaConfig micro_llama() {
  nn::LlamaConfig c;
  c.vocab_size = 13;
  c.hidden_size = 8;
  c.intermediate_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.max_position_embeddings = 4;
  return c;
}

}  // namespace tg::test
