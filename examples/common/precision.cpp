#include "examples/common/precision.h"

#include <cstdio>

#include "core/memory.h"

namespace examples {

const char* const kDtypeHelp =
    "f32 | bf16 (bf16: the frozen base in bfloat16, LoRA weights and AdamW state in float32; "
    "meant for the GPU, runs on the CPU too but slower than f32 there)";

tg::DType dtype_flag(const Flags& flags) {
  const std::string d = flags.str("dtype");
  if (d == "f32") return tg::kFloat32;
  if (d == "bf16") return tg::kBFloat16;
  throw UsageError("--dtype wants f32 or bf16, got '" + d + "'\n" + flags.usage());
}

std::string peak_memory_line(tg::Device device) {
  const tg::MemoryStats s = tg::memory_stats(device);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char buf[128];
  std::snprintf(buf, sizeof buf, "peak GPU memory: %.2f GiB (allocated), %.2f GiB (reserved)",
                static_cast<double>(s.peak_bytes) / kGiB, static_cast<double>(s.bytes_reserved) / kGiB);
  return buf;
}

}  // namespace examples
