#include "nn/models/detail/fp8_checkpoint.h"

#include <cmath>

#include "core/shape.h"
#include "ops/cast.h"
#include "ops/fp8_math.h"

namespace tg::nn::fp8_checkpoint {

QuantizationConfig parse_quantization_config(const ConfigFields& f, DType model_dtype) {
  if (f.string("quant_method", "") != "fp8") f.unsupported("quant_method", "\"fp8\"");
  if (f.string("fmt", "e4m3") != "e4m3") f.unsupported("fmt", "\"e4m3\" (float8_e4m3fn weights)");
  if (f.string("activation_scheme", "dynamic") != "dynamic")
    f.unsupported("activation_scheme", "\"dynamic\" (activations quantised on the fly; static scales are not read)");
  const json::Value* block = f.get("weight_block_size");
  const bool blocks_128 = block && block->is_array() && block->as_array().size() == 2 &&
                          block->as_array()[0].is_int() && block->as_array()[0].as_int() == fp8::kBlock &&
                          block->as_array()[1].is_int() && block->as_array()[1].as_int() == fp8::kBlock;
  if (!blocks_128) f.unsupported("weight_block_size", "[128, 128] (one multiplier a 128x128 block)");
  TG_CHECK(model_dtype == kFloat32 || model_dtype == kBFloat16, "from_pretrained", "an FP8 folder computes in float32 "
           "or bfloat16 (options.dtype), got ", model_dtype);
  QuantizationConfig c{.load_in_fp8 = true, .fp8_scaling = Fp8Scaling::Block128, .compute_dtype = model_dtype};
  if (const json::Value* skip = f.get("modules_to_not_convert")) {
    if (!skip->is_array()) f.bad("modules_to_not_convert", "a list of module names or null");
    c.skip_modules.clear();
    for (const json::Value& m : skip->as_array()) {
      if (!m.is_string()) f.bad("modules_to_not_convert", "a list of module names or null");
      c.skip_modules.push_back(m.as_string());
    }
  }
  return c;
}

void check_layer(const std::string& file, const std::string& weight_key, const std::string& weight_code,
                 const Shape& weight_shape, const std::string& scale_code, const Shape& scale_shape, const Shape& shape) {
  const std::string scale_key = weight_key + "_scale_inv";
  TG_CHECK(weight_code == "F8_E4M3", "from_pretrained", "'", file, "': '", weight_key, "' is ", weight_code,
           ", but beside its weight_scale_inv it wants F8_E4M3");
  TG_CHECK(weight_shape == shape, "from_pretrained", "'", file, "': '", weight_key, "' has shape ", weight_shape,
           ", config.json's model wants ", shape);
  TG_CHECK(scale_code == "F32", "from_pretrained", "'", file, "': '", scale_key, "' is ", scale_code, ", wants F32");
  const Shape want{(shape[0] + fp8::kBlock - 1) / fp8::kBlock, (shape[1] + fp8::kBlock - 1) / fp8::kBlock};
  TG_CHECK(scale_shape == want, "from_pretrained", "'", file, "': '", scale_key, "' has shape ", scale_shape,
           ", wants ", want, " (one multiplier a 128x128 block of the ", shape, " weight)");
}

void check_scales(const Tensor& scale_inv, const std::string& key, const std::string& file) {
  const std::vector<float> s = tg::to(scale_inv, Device::cpu()).to_vector<float>();
  const int64_t cols = scale_inv.shape()[1];
  for (size_t i = 0; i < s.size(); ++i)
    TG_CHECK(std::isfinite(s[i]) && s[i] > 0.0f, "from_pretrained", "'", file, "': '", key, "' holds ", s[i], " at [",
             static_cast<int64_t>(i) / cols, ", ", static_cast<int64_t>(i) % cols,
             "]; the multipliers must be finite and positive");
}

}  // namespace tg::nn::fp8_checkpoint
