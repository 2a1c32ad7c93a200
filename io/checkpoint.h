// Module checkpoints as safetensors files, named by the module's state_dict keys (so a Llama
// checkpoint has transformers' names).
#pragma once

#include <string>

#include "io/safetensors.h"
#include "nn/module.h"

namespace tg::io {

// Writes module.state_dict() atomically (tied tensors are written under each name).
void save_state_dict(const nn::Module& module, const std::string& path, const safetensors::Metadata& metadata = {});
// Reads `path` into the module (see Module::load_state_dict for strict). Values are converted to
// each parameter's dtype and device.
nn::LoadResult load_state_dict_file(nn::Module& module, const std::string& path, bool strict = true);

}  // namespace tg::io
