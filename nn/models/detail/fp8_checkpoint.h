// How FP8 checkpoints are stored (the DeepSeek-V3 / Qwen3 FP8 releases, transformers' FP8
// integration): config.json's "quantization_config" {"quant_method": "fp8", "fmt": "e4m3",
// "activation_scheme": "dynamic", "weight_block_size": [128, 128], "modules_to_not_convert": [...]},
// and per quantised Linear <layer>.weight (F8_E4M3 [out, in]) and <layer>.weight_scale_inv (F32
// [ceil(out / 128), ceil(in / 128)], the dequantisation multipliers). nn::LinearFp8 holds them
// under the same names.
#pragma once

#include <string>

#include "core/tensor.h"
#include "nn/models/config_fields.h"
#include "nn/models/quantization.h"

namespace tg::nn::fp8_checkpoint {

inline constexpr const char* kScaleSuffix = ".weight_scale_inv";

// The QuantizationConfig of an FP8 quantization_config `f` (load_in_fp8, 128x128 blocks,
// modules_to_not_convert as skip_modules), computing in `model_dtype`. tg::Error naming the field
// for another format, block size or a static activation scheme.
QuantizationConfig parse_quantization_config(const ConfigFields& f, DType model_dtype);
// The file tensor of `layer`'s weight (F8_E4M3) and of its multipliers (F32) fit `shape` [out, in]:
// tg::Error naming the file, the key, what it holds and what it wants otherwise.
void check_layer(const std::string& file, const std::string& weight_key, const std::string& weight_code,
                 const Shape& weight_shape, const std::string& scale_code, const Shape& scale_shape, const Shape& shape);
// Every multiplier of `scale_inv` (read from `file` as `key`) finite and positive: tg::Error naming
// the first that is not.
void check_scales(const Tensor& scale_inv, const std::string& key, const std::string& file);

}  // namespace tg::nn::fp8_checkpoint
