#include "examples/common/preflight.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/memory.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"
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

namespace {

std::string gib_text(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// What nn::tile_mlps tiles: a gated MLP's gate_proj / gate_up_proj right under "mlp." (not an expert's).
bool has_gated_mlp(const std::vector<train::WeightShape>& weights) {
  return std::any_of(weights.begin(), weights.end(), [](const train::WeightShape& w) {
    return w.name.ends_with("mlp.gate_proj.weight") || w.name.ends_with("mlp.gate_up_proj.weight");
  });
}

}  // namespace

void check_memory(const std::string& base, const train::MemoryEstimateOptions& o, Device device) {
  std::vector<train::WeightShape> weights;
  for (const safetensors::TensorInfo& t : nn::pretrained_tensors(base)) weights.push_back({t.name, t.shape});
  const bool gated = has_gated_mlp(weights);
  if (o.mlp_chunk_tokens > 0 && !gated)
    throw UsageError("--tiled-mlp: '" + base + "' has no gated MLP (mlp.gate_proj or mlp.gate_up_proj) to tile; the "
                     "Llama-like families have one, GPT-2 and the experts of a mixture do not: drop --tiled-mlp\n");
  const fs::path config = fs::path(base) / "config.json";
  const train::ModelSizes sizes = train::model_sizes(read_text(config), config.string());
  const train::MemoryEstimate e = train::estimate_training_memory(weights, sizes, o);
  const size_t available = available_memory(device);
  const std::string where = device.is_cpu() ? "the host" : "GPU " + std::to_string(device.index);
  const std::string have = gib_text(static_cast<double>(available)) + " available";
  std::printf("memory estimate: %s; %s on %s\n", e.str().c_str(), have.c_str(), where.c_str());
  if (o.offload_activations && device.is_cuda()) {
    const size_t host = available_memory(Device::cpu());
    if (host > 0 && static_cast<size_t>(e.host) > host)
      throw UsageError("--offload-activations keeps " + gib_text(static_cast<double>(e.host)) +
                       " of activations in host memory, the host has " + gib_text(static_cast<double>(host)) +
                       " available: lower --batch or --seq, or drop --offload-activations\n");
  }
  if (available == 0 || static_cast<size_t>(e.total()) <= available) return;
  // Each option the run does not take, and whether it would fit: the precision ones alone, the
  // activation ones each with those before it (offload needs checkpointing; tiling pays at length).
  std::string remedies;
  auto option = [&](const std::string& flags, const char* what, const train::MemoryEstimateOptions& with) {
    const int64_t need = train::estimate_training_memory(weights, sizes, with).total();
    remedies += flags + " (" + what + ": ~" + gib_text(static_cast<double>(need)) +
                (static_cast<size_t>(need) <= available ? ", fits), " : "), ");
  };
  if (!o.load_in_4bit && !o.full) {
    train::MemoryEstimateOptions with = o;
    with.load_in_4bit = true;
    option("--load-in-4bit", "the base's Linear weights in 4 bits", with);
  }
  if (o.dtype == kFloat32) {
    train::MemoryEstimateOptions with = o;
    with.dtype = kBFloat16;
    option("--dtype bf16", "half the weights and activations", with);
  }
  train::MemoryEstimateOptions with = o;
  std::string combined;
  if (!o.gradient_checkpointing) {
    with.gradient_checkpointing = true;
    combined = "--gradient-checkpointing";
    option(combined, "one layer's activations at a time", with);
  }
  if (!o.offload_activations && device.is_cuda()) {
    with.gradient_checkpointing = with.offload_activations = true;
    combined += (combined.empty() ? "" : " ") + std::string("--offload-activations");
    option(combined, "the layers' checkpoints in host memory", with);
  }
  if (gated && o.mlp_chunk_tokens == 0 && o.seq * o.batch > kTiledMlpChunk) {
    with.mlp_chunk_tokens = kTiledMlpChunk;
    combined += (combined.empty() ? "" : " ") + std::string("--tiled-mlp ") + std::to_string(kTiledMlpChunk);
    option(combined, "the MLP's intermediates a chunk at a time", with);
  }
  const int64_t longest = train::longest_fitting_seq(weights, sizes, o, static_cast<int64_t>(available));
  const std::string seq_fits = longest > 0 ? "the longest --seq that fits at --batch " + std::to_string(o.batch) + " is " +
                                                 std::to_string(longest)
                                           : "no --seq fits at --batch " + std::to_string(o.batch);
  throw UsageError("the run needs " + e.str() + " on " + where + ", which has " + have +
                   ": it would run out of memory loading or training; " + seq_fits + "; to fit, try " + remedies +
                   "a smaller --batch (raise --grad-accum to keep the step) or --seq\n");
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
