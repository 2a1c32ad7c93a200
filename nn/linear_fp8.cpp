#include "nn/linear_fp8.h"

#include "ops/cast.h"

namespace tg::nn {
namespace {

int64_t dim_of(const Fp8Weight& w, int i) { return w.data.defined() && w.data.dim() == 2 ? w.data.shape()[i] : 0; }

}  // namespace

LinearFp8::LinearFp8(Fp8Weight w, const Tensor& b, DType compute)
    : QuantizedLinear("LinearFp8", dim_of(w, 1), dim_of(w, 0), w.data, b, compute), fp8(std::move(w)) {
  check_fp8_weight(fp8, "weight", "LinearFp8");
  TG_CHECK(compute == kFloat32 || compute == kBFloat16, "LinearFp8", "compute_dtype ", compute,
           ", wants float32 or bfloat16");
  // The multipliers keep float32 through Module::to(dtype).
  register_buffer("weight_scale_inv", fp8.scale_inv, /*persistent=*/true, /*keeps_dtype=*/true);
}

Tensor LinearFp8::forward(const Tensor& x) {
  const Tensor b = bias.defined() ? tg::to(bias, compute_dtype) : bias;
  return tg::to(linear_fp8(tg::to(x, compute_dtype), fp8, b), x.dtype());
}

std::shared_ptr<const FrozenWeight> LinearFp8::frozen() const { return frozen_fp8(fp8, compute_dtype); }

Tensor LinearFp8::dequantized_weight(DType dtype) const { return dequantize_fp8(fp8, dtype); }

std::shared_ptr<QuantizedLinear> LinearFp8::with_bias(const Tensor& b) const {
  return std::make_shared<LinearFp8>(fp8, b, compute_dtype);
}

std::vector<QuantizedSlot> LinearFp8::state_slots() { return {{"weight_scale_inv", &fp8.scale_inv}}; }

std::string LinearFp8::extra_repr() const {
  return Linear::extra_repr() + (fp8.scaling == Fp8Scaling::Block128 ? ", blocks=128x128" : ", scales=per row") +
         ", compute_dtype=" + dtype_name(compute_dtype);
}

}  // namespace tg::nn
