#include "nn/models/llama.h"

namespace tg::nn {

void LlamaConfig::validate() const {
  check_sizes(*this, "LlamaConfig");
  TG_CHECK(attention_head_dim >= 0, "LlamaConfig", "head_dim must be >= 0, got ", attention_head_dim);
  TG_CHECK(attention_head_dim > 0 || hidden_size % num_attention_heads == 0, "LlamaConfig", "hidden_size ",
           hidden_size, " is not divisible by num_attention_heads ", num_attention_heads);
  TG_CHECK(sliding_window >= 0, "LlamaConfig", "sliding_window must be >= 0, got ", sliding_window);
  rope_scaling.validate(head_dim(), max_position_embeddings, rope_theta);
  TG_CHECK(head_dim() % 2 == 0, "LlamaConfig", "head_dim ", head_dim(), " must be even for rotary embedding");
  TG_CHECK(kv_heads() > 0 && num_attention_heads % kv_heads() == 0, "LlamaConfig", "num_key_value_heads ",
           kv_heads(), " must divide num_attention_heads ", num_attention_heads);
}

int64_t LlamaConfig::num_parameters() const {
  const int64_t d = hidden_size, q = num_attention_heads * head_dim(), kv = kv_heads() * head_dim();
  const bool qkv_biased = attention_bias || qkv_bias;
  const int64_t attn = d * q * 2 + d * kv * 2 + (qkv_biased ? q + 2 * kv : 0) + (attention_bias ? d : 0) +
                       (qk_norm ? 2 * head_dim() : 0);     // q, o [q, d]; k, v [kv, d]
  const int64_t mlp = 3 * d * intermediate_size + (mlp_bias ? 2 * intermediate_size + d : 0);  // gate, up, down
  const int64_t layer = attn + mlp + 2 * d;                // + two RMSNorm weights
  return vocab_size * d * (tie_word_embeddings ? 1 : 2) + num_hidden_layers * layer + d;
}

namespace {

// The presets: their sizes, the rest the defaults.
LlamaConfig sized(int64_t vocab, int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads, int64_t seq) {
  LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.max_position_embeddings = seq;
  return c;
}

}  // namespace

LlamaConfig LlamaConfig::tiny() { return sized(256, 128, 344, 4, 4, 128); }
LlamaConfig LlamaConfig::small() { return sized(256, 384, 1024, 6, 6, 256); }
LlamaConfig LlamaConfig::bench_135m() { return sized(32000, 768, 2048, 12, 12, 1024); }

LlamaConfig LlamaConfig::by_name(const std::string& name) {
  if (name == "tiny") return tiny();
  if (name == "small") return small();
  if (name == "bench-135m") return bench_135m();
  fail("LlamaConfig", "unknown config '", name, "' (tiny, small, bench-135m)");
}

DecoderSpec llama_spec(const LlamaConfig& c) {
  c.validate();
  DecoderSpec s = sized_spec(c, "Llama");
  s.attention = {.num_kv_heads = c.kv_heads(), .head_dim = c.head_dim(), .qkv_bias = c.attention_bias || c.qkv_bias,
                 .o_bias = c.attention_bias, .qk_norm = c.qk_norm, .qk_norm_eps = c.rms_norm_eps,
                 .sliding_window = c.sliding_window};
  s.mlp.bias = c.mlp_bias;
  return s;
}

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& c, Generator& gen)
    : DecoderForCausalLM(llama_spec(c), gen), config(c) {}

}  // namespace tg::nn
