#include "train/memory_estimate.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/models/pretrained.h"

namespace tg::train {
namespace {

// config.json's size under either family's name (Llama-like, GPT-2), 0 when absent.
int64_t config_size(const json::Value& config, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (const json::Value* v = config.find(k); v && v->is_int() && v->as_int() > 0) return v->as_int();
  return 0;
}

bool is_embedding(const std::string& name) {
  return name.find("embed") != std::string::npos || name.find("wte.") != std::string::npos ||
         name.find("wpe.") != std::string::npos || name.find("lm_head") != std::string::npos;
}

// The module path of a 2-D ".weight" tensor that LoRA would wrap, as peft matches it.
bool targeted(const std::string& name, const std::vector<std::string>& targets) {
  if (!name.ends_with(".weight") || is_embedding(name)) return false;
  const std::string path = name.substr(0, name.size() - 7);
  for (const std::string& t : targets)
    if (t == "all-linear" || path == t || path.ends_with("." + t)) return true;
  return false;
}

}  // namespace

std::string MemoryEstimate::str() const {
  const bool gib = total() >= (int64_t{1} << 30);
  const double unit = gib ? 1024.0 * 1024.0 * 1024.0 : 1024.0 * 1024.0;
  char buf[192];
  std::snprintf(buf, sizeof buf, "~%.1f %s (weights %.1f, trained weights + gradients + AdamW %.1f, activations %.1f)",
                static_cast<double>(total()) / unit, gib ? "GiB" : "MiB", static_cast<double>(weights) / unit,
                static_cast<double>(training) / unit, static_cast<double>(activations) / unit);
  return buf;
}

MemoryEstimate estimate_training_memory(const std::string& folder, const MemoryEstimateOptions& o) {
  MemoryEstimate e;
  const double dtype_bytes = static_cast<double>(element_size(o.dtype));
  for (const safetensors::TensorInfo& t : nn::pretrained_tensors(folder)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const bool linear = t.shape.size() == 2 && t.name.ends_with(".weight") && !is_embedding(t.name);
    // NF4: half a byte a value, plus a block's scale (64 values, double quantised: about a byte).
    // FP8: a byte a value (a 128x128 block's float32 scale is 1/4096 byte a value).
    const double bytes = !linear ? dtype_bytes : o.load_in_4bit ? 0.52 : o.load_in_fp8 ? 1.0 : dtype_bytes;
    e.weights += static_cast<int64_t>(static_cast<double>(n) * bytes);
    if (o.full) {
      e.training += static_cast<int64_t>(static_cast<double>(n) * dtype_bytes) + n * 8;  // gradient, two moments
    } else if (linear && targeted(t.name, o.lora_targets)) {
      e.training += o.lora_r * (t.shape[0] + t.shape[1]) * 4 * 4;  // float32 A, B, their gradients, two moments
    }
  }
  const std::vector<uint8_t> bytes = io::read_file((std::filesystem::path(folder) / "config.json").string());
  const json::Value config = json::parse(std::string(bytes.begin(), bytes.end()));
  const int64_t hidden = config_size(config, {"hidden_size", "n_embd"});
  const int64_t layers = config_size(config, {"num_hidden_layers", "n_layer"});
  const int64_t given_inner = config_size(config, {"intermediate_size", "n_inner"});
  const int64_t inner = given_inner ? given_inner : 4 * hidden;  // GPT-2's n_inner null: 4 x n_embd
  const int64_t tokens = o.batch * o.seq;
  // Kept for backward a layer and token: about 5 hidden-sized tensors and 2 of the MLP's width.
  const int64_t layer_bytes = static_cast<int64_t>(static_cast<double>(5 * hidden + 2 * inner) * dtype_bytes);
  e.activations = o.gradient_checkpointing
                      ? tokens * (layers * static_cast<int64_t>(static_cast<double>(hidden) * dtype_bytes) + layer_bytes)
                      : tokens * layers * layer_bytes;
  return e;
}

}  // namespace tg::train
