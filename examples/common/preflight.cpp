#include "examples/common/preflight.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/memory.h"
#include "io/file.h"
#include "io/json.h"
#include "nn/models/architecture.h"
#include "nn/models/pretrained.h"
#include "peft/lora.h"

namespace examples {
namespace {

namespace fs = std::filesystem;
using namespace tg;

std::string read_text(const fs::path& file) {
  const std::vector<uint8_t> bytes = io::read_file(file.string(), io::kMaxConfigBytes);
  return std::string(bytes.begin(), bytes.end());
}

// The family config.json names (the toy is a Llama); nullptr when it names none we know (the load
// then says so).
const nn::Architecture* folder_architecture(const std::string& base) {
  if (!fs::is_directory(base)) return nn::find_architecture("LlamaForCausalLM");
  try {
    const json::Value config = json::parse(read_text(fs::path(base) / "config.json"));
    const json::Value* a = config.is_object() ? config.find("architectures") : nullptr;
    if (a && a->is_array() && a->size() == 1 && a->as_array()[0].is_string())
      return nn::find_architecture(a->as_array()[0].as_string());
    const json::Value* t = config.is_object() ? config.find("model_type") : nullptr;
    return t && t->is_string() ? nn::find_architecture(t->as_string()) : nullptr;
  } catch (const Error&) {
    return nullptr;  // from_pretrained names what is wrong with it
  }
}

}  // namespace

std::vector<std::string> lora_targets(const Flags& flags, const std::string& base, bool full) {
  if (full) return {};
  if (flags.str("targets") == "auto") {
    const nn::Architecture* arch = folder_architecture(base);
    if (arch && arch->lora_targets.empty())
      throw UsageError("--targets auto: peft has no default target modules for " + arch->name +
                       ": name them (e.g. --targets qkv_proj,o_proj) or pass --targets all-linear\n");
    return arch ? arch->lora_targets : std::vector<std::string>{};
  }
  const std::vector<std::string> targets = flags.list("targets");
  if (targets.empty()) throw UsageError("--targets is empty: name Linear layers, all-linear or auto\n");
  if (!fs::is_directory(base) || targets == std::vector<std::string>{peft::kAllLinear}) return targets;
  std::vector<std::string> linear;  // 2-D weights' last path components, embeddings and head aside
  for (const safetensors::TensorInfo& t : nn::pretrained_tensors(base)) {
    if (t.shape.size() != 2 || !t.name.ends_with(".weight")) continue;
    const std::string path = t.name.substr(0, t.name.size() - 7), leaf = path.substr(path.rfind('.') + 1);
    if (leaf.find("embed") == std::string::npos && leaf != "lm_head" && leaf != "wte" && leaf != "wpe" &&
        std::find(linear.begin(), linear.end(), leaf) == linear.end())
      linear.push_back(leaf);
  }
  for (const std::string& t : targets)
    if (std::find(linear.begin(), linear.end(), t.substr(t.rfind('.') + 1)) == linear.end()) {
      std::string names;
      for (const std::string& n : linear) names += (names.empty() ? "" : ",") + n;
      throw UsageError("--targets: '" + t + "' names no Linear layer of --base '" + base +
                       "'; its Linear layers are " + names + " (or all-linear: every one but the head)\n");
    }
  return targets;
}

std::shared_ptr<train::OutputDirLock> claim_out(const std::string& out, bool overwrite, bool fresh) {
  std::shared_ptr<train::OutputDirLock> lock = train::OutputDirLock::acquire(out);
  if (!fresh) return lock;
  const std::vector<std::string> found =
      train::previous_run_files(out, {"adapter", "merged", "model", "merged.safetensors", "model.safetensors"});
  if (found.empty()) return lock;
  if (overwrite) {
    train::remove_run_files(out, found);
    return lock;
  }
  throw UsageError("--out '" + out + "' holds another run's files (" + tg::name_list(found, 8) + "): pass " +
                   "--overwrite-output-dir to remove them and start afresh, --resume to continue that run, "
                   "or give another --out\n");
}

void check_memory(const std::string& base, const train::MemoryEstimateOptions& o, Device device) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const train::MemoryEstimate e = train::estimate_training_memory(base, o);
  const size_t available = available_memory(device);
  const std::string where = device.is_cpu() ? "the host" : "GPU " + std::to_string(device.index);
  char have[64];
  std::snprintf(have, sizeof have, "%.1f GiB available", static_cast<double>(available) / kGiB);
  std::printf("memory estimate: %s; %s on %s\n", e.str().c_str(), have, where.c_str());
  if (available == 0 || static_cast<size_t>(e.total()) <= available) return;
  std::string remedies;
  if (!o.load_in_4bit && !o.full) remedies += "--load-in-4bit (the base's Linear weights in 4 bits), ";
  if (o.dtype == kFloat32) remedies += "--dtype bf16 (half the weights and activations), ";
  if (!o.gradient_checkpointing) remedies += "--gradient-checkpointing (one layer's activations at a time), ";
  remedies += "a smaller --batch (raise --grad-accum to keep the step) or --seq";
  throw UsageError("the run needs " + e.str() + " on " + where + ", which has " + have +
                   ": it would run out of memory loading or training; to fit, try " + remedies + "\n");
}

void check_checkpoint_base(const std::string& checkpoint, const std::string& base, bool ignore) {
  const fs::path file = fs::path(checkpoint) / "adapter_config.json";
  if (ignore || !fs::exists(file) || !fs::is_directory(base)) return;
  const peft::LoraConfig adapter = peft::parse_adapter_config(read_text(file), file.string());
  const std::string mismatch = peft::adapter_base_mismatch(adapter.base_model_name_or_path, base,
                                                           json::parse(read_text(fs::path(base) / "config.json")));
  if (!mismatch.empty())
    throw UsageError("--resume '" + checkpoint + "': " + mismatch +
                     " (resume with its base, or pass --ignore-base-mismatch to continue on --base)\n");
}

}  // namespace examples
