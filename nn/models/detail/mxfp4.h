// gpt-oss's MXFP4 expert weights (config.json's quantization_config quant_method "mxfp4";
// transformers' integrations/mxfp4.py dequantises them the same way): for a parameter [E, C, R],
// <name>_blocks uint8 [E, R, C / 32, 16] holds two FP4 (e2m1) values a byte, the low nibble the
// even element, and <name>_scales uint8 [E, R, C / 32] one E8M0 scale 2^(s - 127) per 32 values.
#pragma once

#include <string>

#include "core/tensor.h"

namespace tg::nn::detail {

// The FP4 (e2m1) value of each nibble: 0, 0.5, 1, 1.5, 2, 3, 4, 6, then the same negated.
extern const float kFp4Values[16];

// The parameter [E, C, R] as bfloat16 on the host (each value lut * 2^(s - 127) rounded once), from
// host uint8 blocks and scales. tg::Error naming `name` when their shapes do not fit each other.
Tensor dequantize_mxfp4(const Tensor& blocks, const Tensor& scales, const std::string& name);

}  // namespace tg::nn::detail
