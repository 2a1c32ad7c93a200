// The examples' --dtype and --device flags and the GPU memory line of their reports.
//   f32:  everything in float32.
//   bf16: mixed precision, as peft's default: the frozen base in bfloat16 (bf16 GEMMs and
//         activations), the LoRA weights, their gradients and the AdamW state in float32
//         (peft::LoraConfig::autocast_adapter_dtype), the loss in float32.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "examples/common/flags.h"
#include "io/gguf.h"
#include "nn/models/quantization.h"

namespace examples {

// The help text of --dtype, the same in every example.
extern const char* const kDtypeHelp;

// --dtype: "f32" -> kFloat32, "bf16" -> kBFloat16; UsageError otherwise.
tg::DType dtype_flag(const Flags& flags);

// The help text of --dtype where a model is loaded (lora_finetune, generate): auto as well.
extern const char* const kModelDtypeHelp;
// --dtype for a model at `model_path`: "auto" (transformers' default) is the folder's own
// (nn::pretrained_dtype: config.json's dtype), float32 for a toy checkpoint; else dtype_flag.
tg::DType model_dtype_flag(const Flags& flags, const std::string& model_path);
// A GGUF file's type from --`name`: f32 | f16 | bf16 | q8_0; UsageError naming the flag otherwise.
tg::gguf::TensorType gguf_dtype_flag(const Flags& flags, const std::string& name);
// The same of one value of --`flag` (a list's item); the UsageError ends with `usage`.
tg::gguf::TensorType gguf_dtype_named(const std::string& value, const std::string& flag, const std::string& usage = "");

// --device: "cpu", "cuda", or "auto" (tg::default_device()); UsageError (with the usage) otherwise.
tg::Device device_flag(const Flags& flags);

// QLoRA's flags, with transformers' BitsAndBytesConfig names: --load-in-4bit,
// --bnb-4bit-quant-type nf4 | fp4, --bnb-4bit-use-double-quant; and --load-in-fp8.
void add_quantization_flags(Flags& flags);
// The QuantizationConfig they ask for, computing in `dtype` (load_in_4bit / load_in_fp8 false
// without their flag); UsageError for a bad value or both formats.
tg::nn::QuantizationConfig quantization_flags(const Flags& flags, tg::DType dtype);

// "peak memory: host 0.52 GiB (RSS), GPU 1.23 GiB (allocated), 1.50 GiB (reserved)": the process's
// peak resident set, and on a GPU the most bytes live tensors held since the last
// tg::reset_peak_memory_stats and what the caching allocator holds from the device (it keeps
// freed blocks, so this is also its peak).
std::string peak_memory_line(tg::Device device);
// A field of /proc/self/status in KiB ("VmHWM": the peak resident set, "VmRSS"); nullopt where
// there is none.
std::optional<int64_t> proc_status_kib(const std::string& field);

}  // namespace examples
