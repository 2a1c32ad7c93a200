#include "examples/common/checkpoint.h"

#include "core/autograd.h"
#include "core/primitives.h"
#include "io/safetensors.h"

namespace examples {

void save_training_checkpoint(const std::string& path, const tg::nn::Module& model, const tg::optim::Optimizer& opt,
                              int64_t step, const tg::Generator& data_gen) {
  tg::safetensors::TensorMap tensors;
  for (const auto& [name, p] : model.named_trainable_parameters()) tensors["param/" + name] = p;
  for (const auto& [key, t] : opt.state_dict()) tensors["optim/" + key] = t;
  tg::safetensors::save_file(tensors, path,
                             {{"step", std::to_string(step)},
                              {"data_seed", std::to_string(data_gen.seed())},
                              {"data_offset", std::to_string(data_gen.offset())},
                              // dropout draws from the default generator
                              {"rng_seed", std::to_string(tg::default_generator().seed())},
                              {"rng_offset", std::to_string(tg::default_generator().offset())}});
}

int64_t load_training_checkpoint(const std::string& path, tg::nn::Module& model, tg::optim::Optimizer& opt,
                                 tg::Generator& data_gen) {
  auto loaded = tg::safetensors::load_file_with_metadata(path);
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
  auto meta = [&](const char* key) {
    auto it = loaded.metadata.find(key);
    TG_CHECK(it != loaded.metadata.end(), "load_training_checkpoint", "'", path, "' lacks '", key,
             "' in its metadata: not a training checkpoint");
    return it->second;
  };
  data_gen.set_state(std::stoull(meta("data_seed")), std::stoull(meta("data_offset")));
  tg::default_generator().set_state(std::stoull(meta("rng_seed")), std::stoull(meta("rng_offset")));
  return std::stoll(meta("step"));
}

}  // namespace examples
