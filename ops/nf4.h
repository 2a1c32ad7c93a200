// bitsandbytes' 4-bit weights (QLoRA, arXiv 2305.14314), byte for byte as its quantize_4bit /
// dequantize_4bit store them: NF4 or FP4 codes in blocks of 64, double quantisation optional (the
// format: docs/api.md).
//
//   QuantState4bit q = quantize_4bit(w, "nf4", /*double_quant=*/true);   // w [out, in], frozen
//   Tensor y = linear_4bit(x, q, bias);     // x W^T + b, W dequantised right before the GEMM
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/lora_linear.h"

namespace tg {

// bitsandbytes' QuantState (as_dict's keys) for one weight.
struct QuantState4bit {
  Tensor packed;            // uint8 [(n + 1) / 2]
  Tensor absmax;            // float32 [blocks], or uint8 [blocks] (codes) with double quant
  Tensor quant_map;         // float32 [16]: the value of each 4-bit index
  Tensor nested_absmax;     // float32 [ceil(blocks / 256)] (double quant only)
  Tensor nested_quant_map;  // float32 [256] (double quant only)
  float offset = 0.0f;      // nested_offset: added to every dequantised absmax
  Shape shape;              // the weight's shape
  DType dtype = kFloat32;   // the weight's dtype before quantisation
  std::string quant_type = "nf4";
  int64_t blocksize = 64;

  bool nested() const { return nested_absmax.defined(); }
  int64_t numel() const;
  Device device() const { return packed.device(); }
  // Every tensor moved to `device`.
  QuantState4bit to(Device device) const;
};

// The state lies on the weight's device and is quantised there (CPU: over threads; GPU: a kernel
// giving the CPU's bytes; the double quantisation of absmax, 1/64 of the values, on the host). A
// load-time step: it waits for the device. tg::Error for NaN or inf in the weight (naming the
// element), a quant_type other than "nf4" / "fp4" or a blocksize bitsandbytes does not accept.
QuantState4bit quantize_4bit(const Tensor& weight, const std::string& quant_type = "nf4", bool double_quant = false,
                             int64_t blocksize = 64);
// The weight as `dtype` (float32, bfloat16 or float64), of q.shape. No autograd.
Tensor dequantize_4bit(const QuantState4bit& q, DType dtype);
// The same into `out` (contiguous, q's device, q.numel() elements, any floating dtype).
void dequantize_4bit_(const Tensor& out, const QuantState4bit& q);
// tg::Error naming `name`'s tensor (name.absmax, name.quant_map, ...) when q's pieces do not fit
// together: a packed tensor of the wrong size, a quant_map that is not 16 values, ...
void check_quant_state(const QuantState4bit& q, const std::string& name = "weight", const char* op = "QuantState4bit");

// y = x W^T + bias with W = dequantize_4bit(weight) in x's dtype, written into `workspace` when it
// is defined (contiguous, x's dtype and device, at least W's element count: one buffer shared by
// a model's quantised layers) and allocated otherwise. Differentiable in x and bias only: the
// backward dequantises W again for dx = dy W, so nothing of W's size is kept between them.
Tensor linear_4bit(const Tensor& x, const QuantState4bit& weight, const Tensor& bias = {},
                   const Tensor& workspace = {});

// The weight as a frozen base of lora_linear / linear_group computing in `dtype` (QLoRA's layer as
// one op: nn::Linear4bit under peft's LoRA), its products linear_4bit's; workspace as there.
std::shared_ptr<const FrozenWeight> frozen_4bit(const QuantState4bit& weight, DType dtype,
                                                const Tensor& workspace = {});

// bitsandbytes' create_dynamic_map(signed=True): the 256 sorted values of the 8-bit code of the
// double-quantised absmax.
const std::vector<float>& dynamic_map_8bit();

}  // namespace tg
