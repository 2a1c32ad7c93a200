// nn::Linear4bit: a frozen Linear whose weight is stored in bitsandbytes' 4-bit format (ops/nf4.h),
// as bitsandbytes.nn.Linear4bit. forward is linear_4bit: the weight is dequantised to the compute
// dtype right before the GEMM (and again for dx) into a workspace shared by a model's quantised
// layers (nn/models/quantization.h). The packed uint8 weight refuses requires_grad_. Registered as
// "weight", "bias", the buffers "absmax", "quant_map", "nested_absmax", "nested_quant_map" and the
// non-persistent "workspace": to(device) moves the whole state, to(dtype) only the bias.
#pragma once

#include <utility>
#include <vector>

#include "nn/quantized_linear.h"
#include "ops/nf4.h"

namespace tg::nn {

class Linear4bit : public QuantizedLinear {
 public:
  // Holds `weight` (checked by check_quant_state, [out, in]) and `bias` (kept as given).
  Linear4bit(QuantState4bit weight, const Tensor& bias, DType compute_dtype, const Tensor& workspace = {});
  // x (any floating dtype) is cast to the compute dtype, the output back to x's dtype, as in
  // bitsandbytes.
  Tensor forward(const Tensor& x) override;
  Tensor dequantized_weight(DType dtype) const override;
  std::shared_ptr<QuantizedLinear> with_bias(const Tensor& bias) const override;
  std::vector<QuantizedSlot> state_slots() override;
  const char* format() const override { return "4-bit"; }
  std::shared_ptr<const FrozenWeight> frozen() const override;

  // q's tensors by their buffer names above ("absmax", ...; LoRA on a 4-bit base registers them too).
  static std::vector<std::pair<const char*, Tensor*>> state_buffers(QuantState4bit& q);

  QuantState4bit quant_state;
  Tensor workspace;  // undefined: forward allocates its own

 protected:
  std::string extra_repr() const override;
};

}  // namespace tg::nn
