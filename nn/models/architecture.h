// The registry of model families (transformers' auto classes): for each architecture name of
// config.json, its Hugging Face layout on disk, peft's default LoRA targets and how its config.json
// is read into a model. from_pretrained, save_pretrained, peft and the examples look a family up
// here instead of testing concrete model types; a user's family registers exactly as a built-in one.
#pragma once

#include <any>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/generator.h"

namespace tg::nn {

class CausalLM;
class ConfigFields;
struct GgufModel;

// A checked config.json: the family's config struct (std::any_cast<LlamaConfig>(config) where the
// family is known) and the model it makes (its parameters drawn from `gen`).
struct ModelBuilder {
  std::any config;
  std::function<std::shared_ptr<CausalLM>(Generator& gen)> build;
};

// The builder of `config` for a Model constructed as Model(config, gen).
template <class Model, class Config>
ModelBuilder builder_of(Config config) {
  return {config, [config](Generator& gen) -> std::shared_ptr<CausalLM> { return std::make_shared<Model>(config, gen); }};
}

// A fused [E, rows, cols] expert parameter that the hub's checkpoints store as E x parts 2-D
// tensors (transformers 5's MergeModulelist + Concatenate weight converters; its save_pretrained
// writes them back so). Names are under a layer; "{e}" in a part's name is the expert.
struct ExpertSplit {
  std::string fused;               // "mlp.experts.gate_up_proj"
  std::vector<std::string> parts;  // each expert's row blocks in order: "mlp.experts.{e}.gate_proj.weight", ...
};
// How the hub's checkpoint names differ from the model's (nn/models/detail/checkpoint_layout.h):
// from_pretrained reads both layouts, save_pretrained writes the hub's.
struct CheckpointLayout {
  std::vector<std::pair<std::string, std::string>> renames;  // {hub, model} name endings, e.g. Mixtral's
                                                             // {"block_sparse_moe.gate.weight", "mlp.gate.weight"}
  std::vector<ExpertSplit> experts;
};

struct Architecture {
  std::string name = {};        // config.json's "architectures" entry, e.g. "Qwen2ForCausalLM"
  std::string model_type = {};  // e.g. "qwen2"
  std::string base_prefix = {};  // the base model inside the LM ("model."): base-model checkpoints lack it
  std::string embedding = {};    // the input embedding a tied lm_head.weight is
  // Buffers older transformers versions saved and tapegrad recomputes (causal masks, RoPE tables).
  std::vector<std::string> ignored_suffixes = {};
  // peft's default target_modules (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING); empty where
  // peft has none for the family (Phi-3): the user names them.
  std::vector<std::string> lora_targets = {};
  std::vector<std::string> conv1d_layers = {};  // Linear layers transformers stores [in, out] (GPT-2's Conv1D)
  // config.json's fields -> the checked config and its model (tg::Error naming the field).
  std::function<ModelBuilder(const ConfigFields&)> parse = {};
  // The model as llama.cpp's converter writes it to GGUF (nn/models/gguf.h): its architecture,
  // hyperparameters and tensors; tg::Error naming what llama.cpp cannot run. Empty: no GGUF.
  std::function<GgufModel(const CausalLM&)> gguf = {};
  CheckpointLayout checkpoint_layout = {};
  // Its LoRA step has been checked on a GPU to replay as a CUDA graph bitwise as it runs eagerly:
  // the Trainer then captures it by default (TrainingArguments::cuda_graph "auto").
  bool cuda_graph_validated = false;
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
