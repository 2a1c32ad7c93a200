#include "nn/models/quantization.h"

#include <algorithm>
#include <map>
#include <memory>
#include <typeinfo>

#include "nn/linear4bit.h"
#include "nn/linear_fp8.h"
#include "nn/moe.h"

namespace tg::nn {
namespace {

bool skipped(const std::string& path, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (path == n || (path.size() > n.size() && path.compare(path.size() - n.size() - 1, n.size() + 1, "." + n) == 0))
      return true;
  return false;
}

// Replaces the Linear at `path` by make(its bias): a quantised layer, in the Linear's mode, its bias frozen.
template <class Make>
void install_quantized(Module& model, const std::string& path, const char* op, Make make) {
  auto base = std::dynamic_pointer_cast<Linear>(model.get_submodule(path));
  TG_CHECK(base, op, "'", path, "' is not a Linear");
  auto layer = make(base->bias);
  layer->train(base->is_training());
  if (layer->bias.defined()) layer->bias.requires_grad_(false);
  model.replace_module(path, layer);
}

}  // namespace

void QuantizationConfig::validate(const char* op) const {
  TG_CHECK(load_in_4bit || load_in_fp8, op, "the QuantizationConfig has load_in_4bit and load_in_fp8 false (nothing "
           "to do)");
  TG_CHECK(!(load_in_4bit && load_in_fp8), op, "the QuantizationConfig has both load_in_4bit and load_in_fp8: one "
           "format, please");
  TG_CHECK(quant_type == "nf4" || quant_type == "fp4", op, "quant_type '", quant_type, "', wants nf4 or fp4");
  TG_CHECK(compute_dtype == kFloat32 || compute_dtype == kBFloat16, op, "compute_dtype ", compute_dtype,
           ", wants float32 or bfloat16");
  bool valid = false;
  for (int64_t b : {32, 64, 128, 256, 512, 1024, 2048, 4096}) valid = valid || blocksize == b;
  TG_CHECK(valid, op, "blocksize ", blocksize, ", wants one of 32, 64, ..., 4096");
}

std::vector<std::string> linear_4bit_targets(Module& model, const QuantizationConfig& config, const char* op) {
  config.validate(op);
  std::vector<std::string> paths;
  for (auto& [path, m] : model.named_modules()) {
    auto* linear = dynamic_cast<Linear*>(m);
    if (!linear || path.empty() || skipped(path, config.skip_modules)) continue;
    TG_CHECK(typeid(*linear) == typeid(Linear), op, "'", path, "' is a ", m->type_name(),
             dynamic_cast<QuantizedLinear*>(linear) ? " (already quantised)"
                                                    : " (quantise the base model before apply_lora)");
    TG_CHECK(linear->weight.dtype() == kFloat32 || linear->weight.dtype() == kBFloat16, op, "'", path,
             ".weight' has dtype ", linear->weight.dtype(), ", wants float32 or bfloat16");
    paths.push_back(path);
  }
  TG_CHECK(!paths.empty(), op, model.type_name(), " has no Linear layer to quantise");
  return paths;
}

std::vector<std::string> experts_4bit_targets(Module& model, const QuantizationConfig& config, const char* op) {
  config.validate(op);
  std::vector<std::string> names;
  if (!config.load_in_4bit) return names;
  for (auto& [path, m] : model.named_modules()) {
    auto* experts = dynamic_cast<MoeExperts*>(m);
    if (!experts || skipped(path, config.skip_modules)) continue;
    TG_CHECK(typeid(*experts) == typeid(MoeExperts), op, "'", path, "' is a ", m->type_name(),
             " (quantise the base model before apply_lora)");
    TG_CHECK(!experts->quantized(), op, "'", path, "' holds its experts in 4 bits already");
    TG_CHECK(experts->weight_dtype() == kFloat32 || experts->weight_dtype() == kBFloat16, op, "'", path,
             "' has dtype ", experts->weight_dtype(), ", wants float32 or bfloat16");
    for (const char* p : {"gate_up_proj", "down_proj"}) names.push_back(path + "." + p);
  }
  return names;
}

void install_linear_4bit(Module& model, const std::string& path, QuantState4bit weight, DType compute_dtype,
                         const Tensor& workspace) {
  install_quantized(model, path, "install_linear_4bit", [&](const Tensor& bias) {
    return std::make_shared<Linear4bit>(std::move(weight), bias, compute_dtype, workspace);
  });
}

std::vector<std::string> replace_with_4bit_linear(Module& model, const QuantizationConfig& config) {
  const char* op = "replace_with_4bit_linear";
  TG_CHECK(config.load_in_4bit, op, "the QuantizationConfig has load_in_4bit = false");
  std::vector<std::string> paths = linear_4bit_targets(model, config, op);
  const std::vector<std::string> expert_weights = experts_4bit_targets(model, config, op);
  std::map<std::string, Tensor> workspaces;  // per device, of the largest layer's size
  {
    std::map<std::string, std::pair<Device, int64_t>> largest;
    for (const auto& path : paths) {
      const Tensor& w = model.get_parameter(path + ".weight");
      auto& [device, size] = largest.try_emplace(w.device().str(), w.device(), 0).first->second;
      size = std::max(size, w.numel());
    }
    for (const auto& [name, entry] : largest)
      workspaces[name] = Tensor::empty({entry.second}, {config.compute_dtype, entry.first});
  }
  // Every weight quantised before the model changes: a NaN in the last layer leaves it as it was.
  std::vector<QuantState4bit> states;
  for (const auto& path : paths) {
    try {
      states.push_back(quantize_4bit(model.get_parameter(path + ".weight"), config.quant_type, config.double_quant,
                                     config.blocksize));
    } catch (const Error& e) {
      fail(op, "'", path, ".weight': ", e.what());
    }
  }
  std::vector<std::shared_ptr<Experts4bit>> experts;
  for (const auto& name : expert_weights) {
    const size_t dot = name.rfind('.');
    auto& block = dynamic_cast<MoeExperts&>(*model.get_submodule(name.substr(0, dot)));
    try {
      experts.push_back(Experts4bit::quantize(block.weight(name.substr(dot + 1)), config.quant_type,
                                              config.double_quant, config.blocksize));
    } catch (const Error& e) {
      fail(op, "'", name, "': ", e.what());
    }
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    const Tensor& workspace = workspaces.at(states[i].device().str());
    install_linear_4bit(model, paths[i], std::move(states[i]), config.compute_dtype, workspace);
  }
  for (size_t i = 0; i < expert_weights.size(); ++i) {
    const size_t dot = expert_weights[i].rfind('.');
    dynamic_cast<MoeExperts&>(*model.get_submodule(expert_weights[i].substr(0, dot)))
        .install_4bit(expert_weights[i].substr(dot + 1), std::move(experts[i]));
  }
  paths.insert(paths.end(), expert_weights.begin(), expert_weights.end());
  return paths;
}

void install_linear_fp8(Module& model, const std::string& path, Fp8Weight weight, DType compute_dtype) {
  install_quantized(model, path, "install_linear_fp8", [&](const Tensor& bias) {
    return std::make_shared<LinearFp8>(std::move(weight), bias, compute_dtype);
  });
}

std::vector<std::string> replace_with_fp8_linear(Module& model, const QuantizationConfig& config) {
  const char* op = "replace_with_fp8_linear";
  TG_CHECK(config.load_in_fp8, op, "the QuantizationConfig has load_in_fp8 = false");
  const std::vector<std::string> paths = linear_4bit_targets(model, config, op);
  // Every weight quantised before the model changes: a NaN in the last layer leaves it as it was.
  std::vector<Fp8Weight> weights;
  for (const auto& path : paths) {
    try {
      weights.push_back(quantize_fp8(model.get_parameter(path + ".weight"), config.fp8_scaling));
    } catch (const Error& e) {
      fail(op, "'", path, ".weight': ", e.what());
    }
  }
  for (size_t i = 0; i < paths.size(); ++i) install_linear_fp8(model, paths[i], std::move(weights[i]), config.compute_dtype);
  return paths;
}

}  // namespace tg::nn
