#include "examples/common/checkpoint.h"

#include <limits>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/primitives.h"
#include "io/number.h"
#include "io/safetensors.h"

namespace examples {
namespace {
constexpr const char* kExtra = "extra/";  // the caller's metadata keys
}

void save_training_checkpoint(const std::string& path, const tg::nn::Module& model, const tg::optim::Optimizer& opt,
                              int64_t step, const CheckpointMetadata& extra) {
  tg::safetensors::TensorMap tensors;
  for (const auto& [name, p] : model.named_trainable_parameters()) tensors["param/" + name] = p;
  for (const auto& [key, t] : opt.state_dict()) tensors["optim/" + key] = t;
  tg::safetensors::Metadata meta = {{"step", std::to_string(step)},
                                    // dropout draws from the default generator
                                    {"rng_seed", std::to_string(tg::default_generator().seed())},
                                    {"rng_offset", std::to_string(tg::default_generator().offset())}};
  for (const auto& [k, v] : extra) meta[kExtra + k] = v;
  tg::safetensors::save_file(tensors, path, meta);
}

CheckpointMetadata checkpoint_metadata(const std::string& path) {
  CheckpointMetadata extra;
  for (const auto& [k, v] : tg::safetensors::load_file_with_metadata(path).metadata)
    if (k.rfind(kExtra, 0) == 0) extra[k.substr(std::string(kExtra).size())] = v;
  return extra;
}

int64_t load_training_checkpoint(const std::string& path, tg::nn::Module& model, tg::optim::Optimizer& opt) {
  auto loaded = tg::safetensors::load_file_with_metadata(path);
  // The metadata first: a bad field leaves the model and optimizer untouched.
  auto meta = [&](const char* key) {
    auto it = loaded.metadata.find(key);
    TG_CHECK(it != loaded.metadata.end(), "load_training_checkpoint", "'", path, "' lacks '", key,
             "' in its metadata: not a training checkpoint");
    return it->second;
  };
  auto number = [&]<class T>(const char* key, T) {
    const std::string text = meta(key);
    const std::optional<T> v = tg::io::parse_integer<T>(text);
    TG_CHECK(v.has_value() && *v >= 0, "load_training_checkpoint", "'", path, "' metadata ", key, "='", text,
             "' is not an integer in [0, ", std::numeric_limits<T>::max(), "]");
    return *v;
  };
  const int64_t step = number("step", int64_t{});
  const uint64_t rng_seed = number("rng_seed", uint64_t{}), rng_offset = number("rng_offset", uint64_t{});
  tg::optim::OptimizerState optim_state;
  tg::NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_trainable_parameters()) {
    auto it = loaded.tensors.find("param/" + name);
    TG_CHECK(it != loaded.tensors.end(), "load_training_checkpoint", "'", path, "' has no parameter '", name,
             "' (was it written for another model or LoRA setting?)");
    TG_CHECK(it->second.shape() == p.shape(), "load_training_checkpoint", "parameter '", name, "' is ",
             it->second.shape(), " in '", path, "', the model has ", p.shape());
    tg::copy_(p, it->second);
  }
  for (const auto& [key, t] : loaded.tensors)
    if (key.rfind("optim/", 0) == 0) optim_state[key.substr(6)] = t;
  opt.load_state_dict(optim_state);  // moments, steps and every parameter group's lr
  tg::default_generator().set_state(rng_seed, rng_offset);
  return step;
}

}  // namespace examples
