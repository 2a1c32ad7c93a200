// SmolLM3 (SmolLM3ForCausalLM) with transformers' parameter names: Llama's blocks, with RoPE left
// out of some layers (no_rope_layers: NoPE layers attend without positions) and, with
// use_sliding_window, a sliding window on the layers layer_types names (transformers' default: the
// NoPE layers). nn/models/smollm3_config.cpp reads and writes its config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/generator.h"
#include "io/json.h"
#include "nn/models/decoder.h"
#include "nn/models/llama.h"

namespace tg::nn {

// LlamaConfig's fields (sliding_window: the window of the sliding layers) and SmolLM3's own.
struct SmolLM3Config : LlamaConfig {
  SmolLM3Config() { architecture = "SmolLM3ForCausalLM"; }

  // Per layer 1 (RoPE) or 0 (none), at least num_hidden_layers entries; empty: every
  // no_rope_layer_interval-th layer (the 4th, 8th, ...) has none.
  std::vector<int64_t> no_rope_layers;
  int64_t no_rope_layer_interval = 4;
  bool use_sliding_window = false;
  // Per layer "full_attention" or "sliding_attention"; empty: with use_sliding_window and a
  // sliding_window, the NoPE layers slide (transformers' default).
  std::vector<std::string> layer_types;

  bool uses_rope(int64_t layer) const;
  bool is_sliding(int64_t layer) const;
  void validate() const;  // tg::Error naming the bad field
};

// The decoder stack of a SmolLM3Config (c.validate() first: tg::Error naming the bad field).
DecoderSpec smollm3_spec(const SmolLM3Config& c);

class SmolLM3ForCausalLM : public DecoderForCausalLM {
 public:
  explicit SmolLM3ForCausalLM(const SmolLM3Config& c, Generator& gen = default_generator());
  json::Value config_json() const override;

  SmolLM3Config config;
};

}  // namespace tg::nn
