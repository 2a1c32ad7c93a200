// nn::LinearFp8: a frozen Linear whose weight is FP8 (e4m3 bytes and float32 multipliers, ops/fp8.h),
// as FP8 checkpoints hold it. forward is linear_fp8: on a Hopper GPU the forward and dx GEMMs run in
// FP8, else the weight is dequantised to the compute dtype right before each GEMM. The uint8 weight
// refuses requires_grad_ (a gradient of an FP8 weight is an error). Registered as "weight" and the
// buffer "weight_scale_inv" (the checkpoints' names) and "bias": to(device) moves the whole state,
// to(dtype) only the bias.
#pragma once

#include <memory>
#include <vector>

#include "nn/quantized_linear.h"
#include "ops/fp8.h"

namespace tg::nn {

class LinearFp8 : public QuantizedLinear {
 public:
  // Holds `weight` (checked by check_fp8_weight) and `bias` (kept as given).
  LinearFp8(Fp8Weight weight, const Tensor& bias, DType compute_dtype);
  // x (any floating dtype) is cast to the compute dtype, the output back to x's dtype.
  Tensor forward(const Tensor& x) override;
  Tensor dequantized_weight(DType dtype) const override;
  std::shared_ptr<QuantizedLinear> with_bias(const Tensor& bias) const override;
  std::vector<QuantizedSlot> state_slots() override;
  const char* format() const override { return "FP8"; }
  std::shared_ptr<const FrozenWeight> frozen() const override;

  Fp8Weight fp8;

 protected:
  std::string extra_repr() const override;
};

}  // namespace tg::nn
