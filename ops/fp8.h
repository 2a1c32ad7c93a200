// FP8 (float8_e4m3fn) weights with float32 dequantisation multipliers, as FP8 checkpoints store them
// (`weight` F8_E4M3 [out, in], `weight_scale_inv` float32 [ceil(out / 128), ceil(in / 128)], one
// multiplier a 128x128 block), or one multiplier an output row. The e4m3 bytes are held as uint8.
//
//   Fp8Weight w = quantize_fp8(dense);      // dense [out, in] float32 / bfloat16, frozen
//   Tensor y = linear_fp8(x, w, bias);      // x W^T + b
//
// On the CPU (and on the GPU where the FP8 GEMM does not apply) linear_fp8 dequantises W to x's
// dtype: exactly x dequantize_fp8(W)^T. On an sm_90 GPU with bfloat16 x of a multiple of 16 rows,
// 128x128 blocks and out, in multiples of 128 (whole blocks), x (and dy for dx) are
// quantised per 1x128 tile on the fly and the forward and dx GEMMs run in FP8 through cuBLASLt
// (its BLK128x128 / VEC128 scale modes), bfloat16 out: the result is then within FP8's rounding of
// the dequantised one (docs/gpu.md).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ops/lora_linear.h"

namespace tg {

enum class Fp8Scaling { Block128, Row };

struct Fp8Weight {
  Tensor data;       // uint8 [out, in]: e4m3 bytes
  Tensor scale_inv;  // float32 [ceil(out / 128), ceil(in / 128)] (Block128) or [out, 1] (Row)
  Fp8Scaling scaling = Fp8Scaling::Block128;

  int64_t out_features() const { return data.shape()[0]; }
  int64_t in_features() const { return data.shape()[1]; }
  Device device() const { return data.device(); }
  // Both tensors moved to `device`.
  Fp8Weight to(Device device) const;
};

// `weight` [out, in] (float32 / bfloat16) quantised on its device: each block's (row's) multiplier
// amax / 448, its values divided by it and rounded to e4m3 (ties to even). A load-time op: it waits
// for the device. tg::Error for NaN or inf (naming the element) or a weight that is not 2-D.
Fp8Weight quantize_fp8(const Tensor& weight, Fp8Scaling scaling = Fp8Scaling::Block128);
// W = e4m3 value * its multiplier, as `dtype` (float32, bfloat16 or float64). No autograd.
Tensor dequantize_fp8(const Fp8Weight& w, DType dtype);
// The same into `out` (contiguous [out, in] on w's device, any floating dtype).
void dequantize_fp8_(const Tensor& out, const Fp8Weight& w);
// tg::Error naming `name` (name, name.weight_scale_inv) when w's pieces do not fit together.
void check_fp8_weight(const Fp8Weight& w, const std::string& name = "weight", const char* op = "Fp8Weight");

// Activations quantised on the fly: x [rows, cols] (float32 / bfloat16) with one multiplier per
// `tile` values of a row (128: the 1x128 tiles of the FP8 GEMM; 0: the whole row). data uint8
// [rows, cols]; scale float32 [rows, tiles] as a view of a [tiles, rows] buffer (the layout
// cuBLASLt reads). No NaN check: a NaN activation gives NaN outputs, as in bfloat16.
struct Fp8Activation {
  Tensor data, scale;
};
Fp8Activation quantize_fp8_activation(const Tensor& x, int64_t tile = 128);

// y = x W^T + bias (see above for the paths). Differentiable in x and bias only: W is a constant
// (its uint8 bytes cannot require a gradient).
Tensor linear_fp8(const Tensor& x, const Fp8Weight& weight, const Tensor& bias = {});

// The weight as a frozen base of lora_linear / linear_group computing in `dtype` (LoRA over an FP8
// base as one op: nn::LinearFp8 under peft's LoRA), its products linear_fp8's.
std::shared_ptr<const FrozenWeight> frozen_fp8(const Fp8Weight& weight, DType dtype);

}  // namespace tg
