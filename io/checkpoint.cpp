#include "io/checkpoint.h"

namespace tg::io {

void save_state_dict(const nn::Module& module, const std::string& path, const safetensors::Metadata& metadata) {
  nn::StateDict sd = module.state_dict();
  safetensors::save_file(safetensors::TensorMap(sd.begin(), sd.end()), path, metadata);
}

nn::LoadResult load_state_dict_file(nn::Module& module, const std::string& path, bool strict) {
  safetensors::TensorMap t = safetensors::load_file(path);
  try {
    return module.load_state_dict(nn::StateDict(t.begin(), t.end()), strict);
  } catch (const Error& e) {
    fail("load_state_dict_file", "'", path, "': ", e.what());
  }
}

}  // namespace tg::io
