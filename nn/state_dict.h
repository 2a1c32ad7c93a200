// Module checkpoints as safetensors files, named by the module's state_dict keys (so a Llama
// checkpoint has transformers' names). io/ reads and writes tensor maps; this is the module side.
#pragma once

#include <string>

#include "io/safetensors.h"
#include "nn/module.h"

namespace tg::nn {

// Writes module.state_dict() atomically (tied tensors are written under each name).
void save_state_dict(const Module& module, const std::string& path, const safetensors::Metadata& metadata = {});
// Reads `path` into the module (see Module::load_state_dict for strict). Values are converted to
// each parameter's dtype and device.
LoadResult load_state_dict_file(Module& module, const std::string& path, bool strict = true);

}  // namespace tg::nn
