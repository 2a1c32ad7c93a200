// Hugging Face model folders, as transformers' from_pretrained / save_pretrained read and write
// them: config.json + model.safetensors, or shards named by model.safetensors.index.json, any
// family of the registry (nn/models/architecture.h). Loading builds the model uninitialised and reads
// each tensor from its file straight into its parameter, in the parameter's dtype and on its device
// (a 64 MiB staging buffer, never a copy of a file); anything in config.json that would change the
// computation unimplemented is a tg::Error naming the field. docs/huggingface.md tells it whole.
//   auto model = tg::nn::from_pretrained("folder", {.dtype = tg::kBFloat16});  // by config.json
//   tg::nn::save_pretrained(*model, "out/model");  // transformers' from_pretrained loads it
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "nn/models/architecture.h"
#include "nn/models/causal_lm.h"
#include "nn/models/gpt2.h"
#include "nn/models/llama.h"
#include "nn/models/quantization.h"

namespace tg::nn {

struct PretrainedOptions {
  // The parameters' dtype, whatever the files hold; nullopt ("auto", transformers 5's default):
  // the folder's own (pretrained_dtype).
  std::optional<DType> dtype = std::nullopt;
  Device device = Device::cpu();
  // No progress line on stderr (it is shown for folders over 1 GB, when stderr is a terminal).
  bool quiet = false;
  // With load_in_4bit (QLoRA, transformers' quantization_config=BitsAndBytesConfig(...)): every
  // Linear but skip_modules becomes an nn::Linear4bit, each weight quantised on `device` as it
  // streams from the folder (converted to `dtype`, float32 or bfloat16, first), so the model is
  // never whole in `dtype` anywhere: beyond the 4-bit model, one layer's weight is held at a time.
  // The result is bitwise replace_with_4bit_linear's on the model loaded in `dtype`. With
  // load_in_fp8 the same, into nn::LinearFp8 layers (replace_with_fp8_linear's).
  QuantizationConfig quantization = {};
};

// The model of `dir` in eval mode (dropout off), as transformers returns it. tg::Error when the
// folder holds another architecture, an unsupported option, or weights that do not fit the
// config (every missing, unexpected and mis-shaped tensor listed).
// A folder transformers + bitsandbytes saved in 4-bit (config.json's quantization_config, the
// layers' packed weights and quant_state: nn/models/detail/bnb_4bit.h) loads as it is: the layers the files
// hold quantised become nn::Linear4bit, computing in options.quantization.compute_dtype when
// options.quantization.load_in_4bit, else in the folder's bnb_4bit_compute_dtype.
std::shared_ptr<LlamaForCausalLM> from_pretrained_llama(const std::string& dir, const PretrainedOptions& options = {});
std::shared_ptr<GPT2LMHeadModel> from_pretrained_gpt2(const std::string& dir, const PretrainedOptions& options = {});
// AutoModelForCausalLM: whichever registered architecture config.json names.
std::shared_ptr<CausalLM> from_pretrained(const std::string& dir, const PretrainedOptions& options = {});

// The dtype from_pretrained(dir) loads in without options.dtype: config.json's "dtype" (older
// transformers' "torch_dtype"), float32 when absent; float16 is widened to float32 (tapegrad has
// no float16 type). tg::Error naming the field for another value.
DType pretrained_dtype(const std::string& dir);

// The tensors of the folder's weight files as their safetensors headers describe them (name,
// file dtype, shape), read without their data: what a load will hold, known before it.
std::vector<safetensors::TensorInfo> pretrained_tensors(const std::string& dir);

// The config a config.json's text describes, checked as from_pretrained checks it (every number
// range-checked, its field named in the error; `source` names the text), and the model it builds.
ModelBuilder parse_pretrained_config(const std::string& json_text, const std::string& source = "config.json");

struct SaveOptions {
  // Above this many bytes of tensors, write model-00001-of-0000N.safetensors shards and
  // model.safetensors.index.json (transformers' max_shard_size); 0: one model.safetensors.
  int64_t max_shard_bytes = 0;
};

// Writes config.json and the weights in the parameters' dtype (tied lm_head once, under the
// embedding's name; GPT-2's Conv1D weights as [in, out]); files from an earlier save of the other
// layout are removed, anything else in `dir` stays. A model with nn::Linear4bit layers is written
// as transformers + bitsandbytes write one (nn/models/detail/bnb_4bit.h: the packed weights, their quant_state
// and config.json's quantization_config), so both load it quantised. The folder is written as a unit
// (io::write_folder_atomic): a reader sees the old model or the new one, never a mix. tg::Error
// for other models and for models with LoRA layers (merge_and_unload them, or save the adapter with peft::save_adapter).
void save_pretrained(const Module& model, const std::string& dir, const SaveOptions& options = {});

// Whether transformers stores the Linear at `path` of `model` as a Conv1D, weight [in, out]
// (GPT-2's c_attn, c_proj and c_fc); peft marks LoRA on those layers fan_in_fan_out.
bool is_hf_conv1d(const Module& model, const std::string& path);

}  // namespace tg::nn
