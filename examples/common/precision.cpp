#include "examples/common/precision.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/memory.h"
#include "io/number.h"
#include "nn/models/pretrained.h"

namespace examples {

const char* const kDtypeHelp =
    "f32 | bf16 (bf16: the frozen base in bfloat16, LoRA weights and AdamW state in float32; "
    "meant for the GPU, runs on the CPU too but slower than f32 there)";

const char* const kModelDtypeHelp =
    "auto | f32 | bf16 (auto: the folder's own, config.json's dtype, as transformers loads it; f32 for a toy "
    "checkpoint). bf16: the frozen base in bfloat16, LoRA weights and AdamW state in float32; meant for the GPU, "
    "runs on the CPU too but slower than f32 there";

tg::DType dtype_flag(const Flags& flags) {
  const std::string d = flags.str("dtype");
  if (d == "f32") return tg::kFloat32;
  if (d == "bf16") return tg::kBFloat16;
  throw UsageError("--dtype wants f32 or bf16, got '" + d + "'\n");
}

tg::DType model_dtype_flag(const Flags& flags, const std::string& model_path) {
  if (flags.str("dtype") != "auto") {
    if (flags.str("dtype") != "f32" && flags.str("dtype") != "bf16")
      throw UsageError("--dtype wants auto, f32 or bf16, got '" + flags.str("dtype") + "'\n");
    return dtype_flag(flags);
  }
  return std::filesystem::is_directory(model_path) ? tg::nn::pretrained_dtype(model_path) : tg::kFloat32;
}

tg::gguf::TensorType gguf_dtype_named(const std::string& value, const std::string& flag, const std::string& usage) {
  if (value == "f32") return tg::gguf::TensorType::kF32;
  if (value == "f16") return tg::gguf::TensorType::kF16;
  if (value == "bf16") return tg::gguf::TensorType::kBF16;
  if (value == "q8_0") return tg::gguf::TensorType::kQ8_0;
  throw UsageError("--" + flag + " wants f32, f16, bf16 or q8_0, got '" + value + "'\n" + usage);
}

tg::gguf::TensorType gguf_dtype_flag(const Flags& flags, const std::string& name) {
  return gguf_dtype_named(flags.str(name), name, flags.usage());
}

tg::Device device_flag(const Flags& flags) {
  const std::string d = flags.str("device");
  if (d == "cpu") return tg::Device::cpu();
  if (d == "cuda") return tg::Device::cuda();
  if (d == "auto") return tg::default_device();
  throw UsageError("--device wants cpu, cuda or auto, got '" + d + "'\n");
}

void add_quantization_flags(Flags& flags) {
  flags.add("load-in-4bit", "false", "QLoRA: the frozen base's Linear layers (all but the head) in 4 bits, "
                                     "quantised as the model loads; LoRA trains on top")
      .add("bnb-4bit-quant-type", "nf4", "with --load-in-4bit: nf4 | fp4")
      .add("bnb-4bit-use-double-quant", "true", "with --load-in-4bit: quantise the blocks' scales too (8-bit)")
      .add("load-in-fp8", "false", "the frozen base's Linear layers (all but the head) in FP8 (e4m3, 128x128 block "
                                   "scales), quantised as the model loads; on a Hopper GPU their GEMMs run in FP8");
}

tg::nn::QuantizationConfig quantization_flags(const Flags& flags, tg::DType dtype) {
  const std::string type = flags.str("bnb-4bit-quant-type");
  if (type != "nf4" && type != "fp4")
    throw UsageError("--bnb-4bit-quant-type wants nf4 or fp4, got '" + type + "'\n");
  if (flags.boolean("load-in-4bit") && flags.boolean("load-in-fp8"))
    throw UsageError("--load-in-4bit and --load-in-fp8 ask for two formats of the frozen weights: pick one\n");
  return {.load_in_4bit = flags.boolean("load-in-4bit"), .load_in_fp8 = flags.boolean("load-in-fp8"), .quant_type = type,
          .double_quant = flags.boolean("bnb-4bit-use-double-quant"), .compute_dtype = dtype};
}

std::optional<int64_t> proc_status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::string_view value(line);  // "VmHWM:\t  123456 kB"
    value.remove_prefix(field.size() + 1);
    value.remove_prefix(std::min(value.size(), value.find_first_not_of(" \t")));
    if (value.ends_with(" kB")) value.remove_suffix(3);
    return tg::io::parse_integer<int64_t>(value);
  }
  return std::nullopt;
}

std::string peak_memory_line(tg::Device device) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  // The process's peak resident set (VmHWM), where /proc has it.
  const std::optional<int64_t> kib = proc_status_kib("VmHWM");
  const double rss_gib = kib ? static_cast<double>(*kib) * 1024.0 / kGiB : -1;
  char buf[192];
  int n = std::snprintf(buf, sizeof buf, "peak memory: host %.2f GiB (RSS)", rss_gib);
  if (device.is_cuda()) {
    const tg::MemoryStats s = tg::memory_stats(device);
    std::snprintf(buf + n, sizeof buf - n, ", GPU %.2f GiB (allocated), %.2f GiB (reserved)",
                  static_cast<double>(s.peak_bytes) / kGiB, static_cast<double>(s.bytes_reserved) / kGiB);
  }
  return buf;
}

}  // namespace examples
