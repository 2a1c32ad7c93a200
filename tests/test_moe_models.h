// The mixture-of-experts families' tiny configs the tests share (tests/test_moe.cpp, the fixtures').
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/init.h"
#include "nn/models/detail/mxfp4.h"
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

// A uint8 host tensor of `shape` holding `bytes`.
inline Tensor bytes_tensor(const std::vector<uint8_t>& bytes, const Shape& shape) {
  Tensor t = Tensor::empty(shape, {kUInt8});
  std::copy(bytes.begin(), bytes.end(), t.data_ptr<uint8_t>());
  return t;
}

// gpt-oss's released layout in the saved folder `dir` of `model`: its expert weights as MXFP4
// _blocks and _scales of random FP4 codes and block scales (quantization_config "mxfp4"), the
// model's expert weights set to the values they encode.
inline void write_mxfp4_experts(const std::filesystem::path& dir, nn::MoeForCausalLM& model) {
  safetensors::TensorMap files = safetensors::load_file(dir / "model.safetensors");
  for (int64_t l = 0; l < model.config.base.num_hidden_layers; ++l)
    for (const std::string p : {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}) {
      const std::string name = "model.layers." + std::to_string(l) + "." + p;
      const Tensor w = files.at(name);  // [E, C, R]
      const int64_t E = w.shape()[0], C = w.shape()[1], R = w.shape()[2];
      // every value an FP4 value times 2^(s - 127), s a per-block scale
      std::vector<uint8_t> blocks(E * R * C / 2), scales(E * R * C / 32);
      Generator pick(static_cast<uint64_t>(C * 7 + R));
      const std::vector<int64_t> nib = randint(0, 16, {E * R * C}, pick).to_vector<int64_t>();
      const std::vector<int64_t> sc = randint(120, 130, {E * R * C / 32}, pick).to_vector<int64_t>();
      std::vector<float> values(E * C * R);
      for (int64_t e = 0; e < E; ++e)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t col = 0; col < C; ++col) {
            const int64_t i = (e * R + r) * C + col, g = i / 32;
            scales[g] = static_cast<uint8_t>(sc[g]);
            blocks[i / 2] |= static_cast<uint8_t>(nib[i] << (col % 2 ? 4 : 0));
            values[(e * C + col) * R + r] =
                nn::detail::kFp4Values[nib[i]] * std::ldexp(1.0f, static_cast<int>(sc[g]) - 127);
          }
      files.erase(name);
      files[name + "_blocks"] = bytes_tensor(blocks, {E, R, C / 32, 16});
      files[name + "_scales"] = bytes_tensor(scales, {E, R, C / 32});
      NoGradGuard g;
      copy_(model.get_parameter(name), from_vector(values, {E, C, R}));
    }
  safetensors::save_file(files, dir / "model.safetensors", {{"format", "pt"}});
  json::Value config = json::parse(read_text(dir / "config.json"));
  config.set("quantization_config", json::Value::object().set("quant_method", "mxfp4"));
  io::write_file_atomic(dir / "config.json", json::dump(config));
}

}  // namespace tg::test
