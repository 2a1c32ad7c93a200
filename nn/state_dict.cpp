#include "nn/state_dict.h"

namespace tg::nn {

void save_state_dict(const Module& module, const std::string& path, const safetensors::Metadata& metadata) {
  StateDict sd = module.state_dict();
  safetensors::save_file(safetensors::TensorMap(sd.begin(), sd.end()), path, metadata);
}

LoadResult load_state_dict_file(Module& module, const std::string& path, bool strict) {
  safetensors::TensorMap t = safetensors::load_file(path);
  try {
    return module.load_state_dict(StateDict(t.begin(), t.end()), strict);
  } catch (const Error& e) {
    fail("load_state_dict_file", "'", path, "': ", e.what());
  }
}

}  // namespace tg::nn
