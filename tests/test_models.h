// Model configs the tests share.
#pragma once

#include "nn/models/gpt2.h"
#include "nn/models/llama.h"

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

// The Hugging Face folder tests' Llama: grouped-query heads, a rope_theta and eps other than the
// defaults; 64 tokens, hidden 32, two layers.
inline nn::LlamaConfig llama_config() {
  nn::LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  c.rope_theta = 500.0;
  c.rms_norm_eps = 1e-6;
  return c;
}

// Their GPT-2 (Conv1D layers, a tied head), with transformers' dropout 0.1: from_pretrained must
// return eval mode.
inline nn::GPT2Config gpt2_config() {
  nn::GPT2Config c;
  c.vocab_size = 72;
  c.n_positions = 16;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 4;
  return c;
}

}  // namespace tg::test
