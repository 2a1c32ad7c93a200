// The Llama architecture with transformers' parameter names (LlamaForCausalLM), so checkpoints
// and peft adapters carry over. Mistral, Qwen2 / Qwen2.5 and Qwen3 are the same model with the
// options of LlamaConfig below (nn/models/llama_config.cpp reads and writes their config.json).
//
//   tg::manual_seed(0);
//   auto model = std::make_shared<tg::nn::LlamaForCausalLM>(tg::nn::LlamaConfig::tiny());
//   tg::Tensor logits = model->forward(ids);            // ids [B, T] int -> [B, T, vocab]
//   tg::Tensor loss = tg::nn::causal_lm_loss(logits, ids);
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/generator.h"
#include "io/json.h"
#include "nn/models/decoder.h"
#include "nn/rotary.h"

namespace tg::nn {

struct LlamaConfig {
  std::string architecture = "LlamaForCausalLM";  // its registry entry (nn/models/architecture.h)
  int64_t vocab_size = 256;
  int64_t hidden_size = 128;
  int64_t intermediate_size = 344;
  int64_t num_hidden_layers = 4;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 0;  // 0: = num_attention_heads
  int64_t max_position_embeddings = 128;  // the rotary tables' length; the spec's "seq"
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;  // every Linear and embedding weight ~ N(0, 0.02)
  RopeScaling rope_scaling;
  int64_t attention_head_dim = 0;  // config.json's head_dim; 0: hidden_size / num_attention_heads
  bool attention_bias = false;     // biases on q/k/v/o_proj (Llama's attention_bias, Qwen3)
  bool qkv_bias = false;           // biases on q/k/v_proj only (Qwen2)
  bool mlp_bias = false;           // biases on gate/up/down_proj
  bool qk_norm = false;            // Qwen3: RMSNorm over each head of q and k (self_attn.q_norm / k_norm)
  int64_t sliding_window = 0;      // Mistral v0.1: > 0, each query sees this many keys back
  // config.json's bos / eos / pad_token_id as read, written back as they were (transformers makes
  // pad_token_id the embedding's padding_idx, and its defaults may lie outside a small vocabulary).
  json::Value token_ids = json::Value::object();

  int64_t head_dim() const { return attention_head_dim ? attention_head_dim : hidden_size / num_attention_heads; }
  int64_t kv_heads() const { return num_key_value_heads ? num_key_value_heads : num_attention_heads; }
  void validate() const;  // tg::Error naming the bad field
  // What LlamaForCausalLM(config).num_parameters() gives, without building it.
  int64_t num_parameters() const;

  // The spec's configurations.
  static LlamaConfig tiny();        // 256 / 128 / 4 layers / 4 heads / 344, seq 128
  static LlamaConfig small();       // 256 / 384 / 6 layers / 6 heads / 1024, seq 256
  static LlamaConfig bench_135m();  // 32000 / 768 / 12 layers / 12 heads / 2048, seq 1024
  // "tiny", "small", "bench-135m"; tg::Error for other names.
  static LlamaConfig by_name(const std::string& name);
};

class ConfigFields;
// config.json's fields every Llama-like family shares (sizes, RoPE, eps, tied head; hidden_act
// silu, no attention dropout), absent ones taking `defaults`' values (the family's transformers
// config defaults; nn/models/llama_config.cpp). tg::Error naming the field.
LlamaConfig read_llama_fields(const ConfigFields& f, const LlamaConfig& defaults);
// The same with transformers' LlamaConfig defaults but for the family's vocab_size and rms_norm_eps.
LlamaConfig read_llama_fields(const ConfigFields& f, const std::string& architecture, int64_t vocab, double eps);
// Those fields as config.json: `sized` (DecoderForCausalLM::sized_config_json) with hidden_act,
// RoPE and the token ids as read.
json::Value llama_fields_json(const LlamaConfig& c, json::Value sized);

// The decoder stack's LlamaConfig: Llama's pre-norm blocks with the config's options
// (c.validate() first: tg::Error naming the bad field).
DecoderSpec llama_spec(const LlamaConfig& c);

// forward(ids [B, T] int32/int64) -> logits [B, T, vocab]; loss(ids, labels): nn/models/causal_lm.h.
class LlamaForCausalLM : public DecoderForCausalLM {
 public:
  explicit LlamaForCausalLM(const LlamaConfig& c, Generator& gen = default_generator());
  json::Value config_json() const override;

  LlamaConfig config;
};

}  // namespace tg::nn
