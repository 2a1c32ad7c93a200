// The registry of model families (transformers' auto classes): for each architecture name of
// config.json, its Hugging Face layout on disk, peft's default LoRA targets, how its config.json is
// read and written and how the model is built. from_pretrained, save_pretrained, peft and the
// examples look a family up here instead of testing concrete model types.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/generator.h"
#include "nn/decoder.h"
#include "nn/gemma.h"
#include "nn/gpt2.h"
#include "nn/llama.h"

namespace tg::nn {

class CausalLM;
class ConfigFields;

// Each family's config struct (Mistral, the Qwen models and Phi-3 are LlamaConfig with their options,
// Gemma 2 and 3 GemmaConfig); a family of one's own on the decoder stack carries its DecoderSpec.
using PretrainedConfig = std::variant<LlamaConfig, GPT2Config, GemmaConfig, DecoderSpec>;

struct Architecture {
  std::string name;        // config.json's "architectures" entry, e.g. "Qwen2ForCausalLM"
  std::string model_type;  // e.g. "qwen2"
  std::string base_prefix;  // the base model inside the LM ("model."): base-model checkpoints lack it
  std::string embedding;    // the input embedding a tied lm_head.weight is
  // Buffers older transformers versions saved and tapegrad recomputes (causal masks, RoPE tables).
  std::vector<std::string> ignored_suffixes;
  std::vector<std::string> lora_targets;   // peft's default target_modules
  std::vector<std::string> conv1d_layers;  // Linear layers transformers stores [in, out] (GPT-2's Conv1D)
  // config.json's fields -> the checked config (tg::Error naming the field).
  std::function<PretrainedConfig(const ConfigFields&)> parse;
  std::function<std::shared_ptr<CausalLM>(const PretrainedConfig&, Generator&)> build;
};

// Every registered family, in the order their names are listed in errors.
const std::vector<const Architecture*>& architectures();
// Adds a family of the user's (transformers' AutoModelForCausalLM.register); `arch` must outlive
// its use. tg::Error when its name or model_type is taken. Not thread-safe: register at start-up.
void register_architecture(const Architecture& arch);
// The family named `name` (an architecture or a model_type); nullptr when none is.
const Architecture* find_architecture(const std::string& name);
// "LlamaForCausalLM, MistralForCausalLM, ...".
std::string architecture_names();

}  // namespace tg::nn
