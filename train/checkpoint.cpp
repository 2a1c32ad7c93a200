#include "train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/primitives.h"
#include "io/number.h"
#include "io/safetensors.h"

namespace tg::train {
namespace {
namespace fs = std::filesystem;
constexpr const char* kExtra = "extra/";  // the caller's metadata keys
constexpr const char* kPrefix = "checkpoint-";
}  // namespace

void save_training_state(const std::string& path, const nn::Module& model, const optim::Optimizer& opt, int64_t step,
                         const CheckpointMetadata& extra) {
  safetensors::TensorMap tensors;
  for (const auto& [name, p] : model.named_trainable_parameters()) tensors["param/" + name] = p;
  for (const auto& [key, t] : opt.state_dict()) tensors["optim/" + key] = t;
  safetensors::Metadata meta = {{"step", std::to_string(step)},
                                // dropout draws from the default generator
                                {"rng_seed", std::to_string(default_generator().seed())},
                                {"rng_offset", std::to_string(default_generator().offset())}};
  for (const auto& [k, v] : extra) meta[kExtra + k] = v;
  safetensors::save_file(tensors, path, meta);
}

CheckpointMetadata training_state_metadata(const std::string& path) {
  CheckpointMetadata extra;
  for (const auto& [k, v] : safetensors::load_file_with_metadata(path).metadata)
    if (k.rfind(kExtra, 0) == 0) extra[k.substr(std::string(kExtra).size())] = v;
  return extra;
}

int64_t load_training_state(const std::string& path, nn::Module& model, optim::Optimizer& opt) {
  auto loaded = safetensors::load_file_with_metadata(path);
  // The metadata first: a bad field leaves the model and optimizer untouched.
  auto meta = [&](const char* key) {
    auto it = loaded.metadata.find(key);
    TG_CHECK(it != loaded.metadata.end(), "load_training_state", "'", path, "' lacks '", key,
             "' in its metadata: not a training state");
    return it->second;
  };
  auto number = [&]<class T>(const char* key, T) {
    return io::checked_integer<T>(meta(key), 0, std::numeric_limits<T>::max(), "load_training_state",
                                  "'" + path + "' metadata " + key);
  };
  const int64_t step = number("step", int64_t{});
  const uint64_t rng_seed = number("rng_seed", uint64_t{}), rng_offset = number("rng_offset", uint64_t{});
  NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_trainable_parameters()) {
    auto it = loaded.tensors.find("param/" + name);
    TG_CHECK(it != loaded.tensors.end(), "load_training_state", "'", path, "' has no parameter '", name,
             "' (was it written for another model or LoRA setting?)");
    TG_CHECK(it->second.shape() == p.shape(), "load_training_state", "parameter '", name, "' is ", it->second.shape(),
             " in '", path, "', the model has ", p.shape());
  }
  for (const auto& [name, p] : model.named_trainable_parameters()) copy_(p, loaded.tensors.at("param/" + name));
  optim::OptimizerState optim_state;
  for (const auto& [key, t] : loaded.tensors)
    if (key.rfind("optim/", 0) == 0) optim_state[key.substr(6)] = t;
  opt.load_state_dict(optim_state);  // moments, steps and every parameter group's lr
  default_generator().set_state(rng_seed, rng_offset);
  return step;
}

std::string checkpoint_dir(const std::string& output_dir, int64_t step) {
  return (fs::path(output_dir) / (kPrefix + std::to_string(step))).string();
}

std::vector<std::pair<int64_t, std::string>> complete_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(output_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !entry.is_directory()) continue;
    const std::string digits = name.substr(std::string(kPrefix).size());
    // Not a folder the Trainer wrote: the step is not its digits alone, or beyond int64.
    const std::optional<int64_t> step = io::parse_integer<int64_t>(digits);
    if (!step || *step < 0) continue;
    if (fs::exists(entry.path() / kTrainingStateFile)) found.emplace_back(*step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

void rotate_checkpoints(const std::string& output_dir, int64_t limit) {
  if (limit <= 0) return;
  const auto found = complete_checkpoints(output_dir);
  for (size_t i = 0; i + static_cast<size_t>(limit) < found.size(); ++i) fs::remove_all(found[i].second);
}

}  // namespace tg::train
