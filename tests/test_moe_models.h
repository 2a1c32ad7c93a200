// The mixture-of-experts families' tiny configs the tests share (tests/test_moe.cpp, the fixtures').
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/init.h"
#include "nn/models/moe_lm.h"

namespace tg::test {

inline const std::vector<std::string> kMoeArchitectures = {"Qwen3MoeForCausalLM", "MixtralForCausalLM",
                                                           "GptOssForCausalLM"};
inline const std::vector<std::string> kExpertTargets = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
inline const std::filesystem::path kMoeConfigs = std::filesystem::path(TG_TESTS_DIR) / "fixtures" / "hf" / "configs";

// Two layers of hidden 16, 4 experts of which 2 a token, weights large enough (initializer 0.2)
// for the routing and gpt-oss's clamps to matter: Qwen3-MoE with a dense second layer
// (mlp_only_layers) and experts of 12, Mixtral's experts of intermediate_size 24, gpt-oss with
// biases, sinks, a window of 4 on its first layer and YaRN.
inline nn::MoeConfig tiny_moe(const std::string& architecture) {
  nn::MoeConfig c;
  nn::LlamaConfig& b = c.base;
  b.architecture = architecture;
  b.vocab_size = 64;
  b.hidden_size = 16;
  b.intermediate_size = 24;
  b.num_hidden_layers = 2;
  b.num_attention_heads = 4;
  b.num_key_value_heads = 2;
  b.attention_head_dim = 8;
  b.max_position_embeddings = 32;
  b.rms_norm_eps = 1e-6;
  b.initializer_range = 0.2;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  if (architecture == "Qwen3MoeForCausalLM") {
    b.qk_norm = true;
    c.moe_intermediate_size = 12;
    c.mlp_only_layers = {1};
  } else if (architecture == "GptOssForCausalLM") {
    b.attention_bias = true;
    b.sliding_window = 4;
    b.rope_scaling.rope_type = "yarn";
    b.rope_scaling.factor = 4.0;
    b.rope_scaling.original_max_position_embeddings = 8;
    b.rope_scaling.truncate = false;
    c.sliding_layers = {true, false};
    c.swiglu_limit = 0.5;  // read and written back; the experts clamp at 7.0 as transformers'
  }
  return c;
}

inline json::Value tiny_moe_json(const std::string& architecture) {
  Generator gen(0);
  return nn::MoeForCausalLM(tiny_moe(architecture), gen).config_json();
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every lora_B ~ N(0, 0.3): the adapters then change what the model computes.
inline void randomise_lora(nn::Module& model, Generator& gen) {
  NoGradGuard g;
  for (auto& [name, p] : model.named_parameters())
    if (name.find("lora_B") != std::string::npos) nn::init::normal_(p, 0.0, 0.3, gen);
}

}  // namespace tg::test
