#include "nn/quantization.h"

#include <algorithm>
#include <map>
#include <memory>
#include <typeinfo>

#include "nn/linear4bit.h"

namespace tg::nn {
namespace {

bool skipped(const std::string& path, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (path == n || (path.size() > n.size() && path.compare(path.size() - n.size() - 1, n.size() + 1, "." + n) == 0))
      return true;
  return false;
}

}  // namespace

std::vector<std::string> replace_with_4bit_linear(Module& model, const QuantizationConfig& config) {
  const char* op = "replace_with_4bit_linear";
  TG_CHECK(config.load_in_4bit, op, "the QuantizationConfig has load_in_4bit = false (nothing to do)");
  TG_CHECK(config.quant_type == "nf4" || config.quant_type == "fp4", op, "quant_type '", config.quant_type,
           "', wants nf4 or fp4");
  TG_CHECK(config.compute_dtype == kFloat32 || config.compute_dtype == kBFloat16, op, "compute_dtype ",
           config.compute_dtype, ", wants float32 or bfloat16");
  std::vector<std::string> paths;
  std::map<std::string, std::pair<Device, int64_t>> largest;  // per device: the workspace's size
  for (auto& [path, m] : model.named_modules()) {
    auto* linear = dynamic_cast<Linear*>(m);
    if (!linear || path.empty() || skipped(path, config.skip_modules)) continue;
    TG_CHECK(typeid(*linear) == typeid(Linear), op, "'", path, "' is a ", m->type_name(),
             typeid(*linear) == typeid(Linear4bit) ? " (already quantised)"
                                                   : " (quantise the base model before apply_lora)");
    TG_CHECK(linear->weight.dtype() == kFloat32 || linear->weight.dtype() == kBFloat16, op, "'", path,
             ".weight' has dtype ", linear->weight.dtype(), ", wants float32 or bfloat16");
    paths.push_back(path);
    const Device d = linear->weight.device();
    auto& [device, size] = largest.try_emplace(d.str(), d, 0).first->second;
    size = std::max(size, linear->weight.numel());
  }
  TG_CHECK(!paths.empty(), op, model.type_name(), " has no Linear layer to quantise");
  std::map<std::string, Tensor> workspaces;
  for (const auto& [name, entry] : largest)
    workspaces[name] = Tensor::empty({entry.second}, {config.compute_dtype, entry.first});
  // Every weight quantised before the model changes: a NaN in the last layer leaves it as it was.
  std::vector<std::shared_ptr<Linear4bit>> layers;
  for (const auto& path : paths) {
    auto base = std::dynamic_pointer_cast<Linear>(model.get_submodule(path));
    QuantState4bit q;
    try {
      q = quantize_4bit(base->weight, config.quant_type, config.double_quant, config.blocksize);
    } catch (const Error& e) {
      fail(op, "'", path, ".weight': ", e.what());
    }
    layers.push_back(std::make_shared<Linear4bit>(std::move(q), base->bias, config.compute_dtype,
                                                  workspaces.at(base->weight.device().str())));
    layers.back()->train(base->is_training());
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    if (layers[i]->bias.defined()) layers[i]->bias.requires_grad_(false);
    model.replace_module(paths[i], layers[i]);
  }
  return paths;
}

}  // namespace tg::nn
