#include "ops/fp8.h"

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/shape.h"
#include "core/trace.h"
#include "ops/binary.h"
#include "ops/cast.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/fp8_kernels.h"
#include "ops/fp8_math.h"
#include "ops/shape.h"

namespace tg {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The block a multiplier covers: 128x128, or a whole row of `in` values.
int64_t block_rows(const Fp8Weight& w) { return w.scaling == Fp8Scaling::Block128 ? fp8::kBlock : 1; }
int64_t block_cols(const Fp8Weight& w) {
  return w.scaling == Fp8Scaling::Block128 ? fp8::kBlock : std::max<int64_t>(1, w.in_features());
}
Shape scale_shape(const Fp8Weight& w) {
  return w.scaling == Fp8Scaling::Block128
             ? Shape{ceil_div(w.out_features(), fp8::kBlock), ceil_div(w.in_features(), fp8::kBlock)}
             : Shape{w.out_features(), 1};
}

// Whether linear_fp8 runs x's GEMMs in FP8 (the conditions ops/fp8.h lists): rows of x [rows, in].
bool fp8_gemm_applies(const Tensor& x, const Fp8Weight& w, int64_t rows) {
#ifdef TG_WITH_CUDA
  return x.device().is_cuda() && x.dtype() == kBFloat16 && w.scaling == Fp8Scaling::Block128 &&
         w.out_features() % fp8::kBlock == 0 && w.in_features() % fp8::kBlock == 0 && rows > 0 && rows % 16 == 0 &&
         cuda::fp8_gemm_supported(x.device().index);
#else
  (void)x, (void)w, (void)rows;
  return false;
#endif
}

#ifdef TG_WITH_CUDA
// Block scales [r, c] with their rows padded to a multiple of 4 (cuBLASLt reads 16-byte rows).
Tensor padded_scales(const Tensor& s) {
  const int64_t c = s.shape()[1], padded = (c + 3) / 4 * 4;
  if (padded == c) return s;
  Tensor out = zeros({s.shape()[0], padded}, s.options());
  copy_(slice(out, 1, 0, c), s);
  return out;
}

// c (+)= a b^T, a [rows, k] bf16 quantised per 1x128 tile (q), b the FP8 weight bytes [n, k] with its
// block scales: the GEMM writes c itself when c is contiguous and overwritten, else a buffer added.
void fp8_matmul_nt(const Tensor& c, const Fp8Activation& q, const Tensor& b_data, const Tensor& b_scale,
                   double beta) {
  const bool direct = beta == 0.0 && c.is_contiguous();
  const Tensor out = direct ? c : Tensor::empty(c.shape(), c.options());
  // q.scale is a [rows, tiles] view of the [tiles, rows] buffer fp8_gemm reads.
  cuda::fp8_gemm(out, q.data, transpose(q.scale, 0, 1), b_data, padded_scales(b_scale));
  if (!direct) copy_(c, beta == 0.0 ? out : add(c, out));
}

Tensor transposed_copy(const Tensor& t) {
  Tensor out = Tensor::empty({t.shape()[1], t.shape()[0]}, t.options());
  cuda::transpose_2d(out, t);
  return out;
}
#endif

// The FP8 weight as lora_linear's base: its products through the FP8 GEMM where it applies (for dx,
// W^T's bytes and its transposed block scales made for the call, exact: a 128x128 block of W is
// one of W^T; the weight stays one byte a value between steps), else W dequantised to `dtype`.
class FrozenFp8 final : public FrozenWeight {
 public:
  FrozenFp8(Fp8Weight w, DType dtype) : w_(std::move(w)), dtype_(dtype) {}
  int64_t out_features() const override { return w_.out_features(); }
  int64_t in_features() const override { return w_.in_features(); }
  Device device() const override { return w_.device(); }
  DType dtype() const override { return dtype_; }
  const char* format() const override { return "FP8"; }

  void forward(const Tensor& y, const Tensor& x, double beta, [[maybe_unused]] std::any& x_derived) const override {
    if (fp8_gemm_applies(x, w_, x.shape()[0])) {
#ifdef TG_WITH_CUDA
      KernelTrace::record("linear_fp8.fp8_forward");
      if (!x_derived.has_value()) x_derived = quantize_fp8_activation(x, fp8::kBlock);
      fp8_matmul_nt(y, std::any_cast<const Fp8Activation&>(x_derived), w_.data, w_.scale_inv, beta);
#endif
    } else {
      KernelTrace::record("linear_fp8.dequantized_forward");
      matrix::gemm(y, x, transpose(dequantize_fp8(w_, x.dtype()), 0, 1), 1.0, beta);
    }
  }
  void dx(const Tensor& dx, const Tensor& dy, double beta) const override {
    if (fp8_gemm_applies(dy, w_, dy.shape()[0])) {
#ifdef TG_WITH_CUDA
      KernelTrace::record("linear_fp8.fp8_dx");
      fp8_matmul_nt(dx, quantize_fp8_activation(dy, fp8::kBlock), transposed_copy(w_.data),
                    transposed_copy(w_.scale_inv), beta);
#endif
    } else {
      KernelTrace::record("linear_fp8.dequantized_dx");
      matrix::gemm(dx, dy, dequantize_fp8(w_, dy.dtype()), 1.0, beta);
    }
  }

 private:
  Fp8Weight w_;
  DType dtype_;
};

}  // namespace

Fp8Weight Fp8Weight::to(Device device) const {
  return {tg::to(data, device), tg::to(scale_inv, device), scaling};
}

void check_fp8_weight(const Fp8Weight& w, const std::string& name, const char* op) {
  TG_CHECK(w.data.defined(), op, "'", name, "' is missing");
  TG_CHECK(w.data.dtype() == kUInt8, op, "'", name, "' has dtype ", w.data.dtype(), ", wants uint8 (e4m3 bytes)");
  TG_CHECK(w.data.dim() == 2 && w.data.numel() > 0, op, "'", name, "' has shape ", w.data.shape(),
           ", wants [out, in] with at least one element");
  TG_CHECK(w.data.is_contiguous(), op, "'", name, "' must be contiguous");
  const std::string s = name + "_scale_inv";
  TG_CHECK(w.scale_inv.defined(), op, "'", s, "' is missing");
  TG_CHECK(w.scale_inv.dtype() == kFloat32, op, "'", s, "' has dtype ", w.scale_inv.dtype(), ", wants float32");
  TG_CHECK(w.scale_inv.shape() == scale_shape(w), op, "'", s, "' has shape ", w.scale_inv.shape(), ", wants ",
           scale_shape(w), w.scaling == Fp8Scaling::Block128 ? " (one per 128x128 block of " : " (one per row of ",
           w.data.shape(), ")");
  TG_CHECK(w.scale_inv.is_contiguous(), op, "'", s, "' must be contiguous");
  TG_CHECK(w.scale_inv.device() == w.data.device(), op, "'", s, "' is on ", w.scale_inv.device(), " but '", name,
           "' on ", w.data.device());
}

Fp8Weight quantize_fp8(const Tensor& weight, Fp8Scaling scaling) {
  const char* op = "quantize_fp8";
  check_defined(op, "weight", weight);
  TG_CHECK(weight.dtype() == kFloat32 || weight.dtype() == kBFloat16, op, "'weight' has dtype ", weight.dtype(),
           ", wants float32 or bfloat16");
  TG_CHECK(weight.dim() == 2 && weight.numel() > 0, op, "'weight' has shape ", weight.shape(),
           ", wants [out, in] with at least one element");
  NoGradGuard no_grad;
  const Device device = weight.device();
  const Tensor x = contiguous(weight.detach());
  Fp8Weight w{Tensor::empty(x.shape(), {kUInt8, device}), Tensor(), scaling};
  w.scale_inv = Tensor::empty(scale_shape(w), {kFloat32, device});
  const int64_t n = x.numel();
  const Tensor first_bad = full({1}, static_cast<double>(n), {kInt64, device});
  TG_DISPATCH(device, quantize_fp8, x, w.data, w.scale_inv, first_bad, block_rows(w), block_cols(w), true);
  // A load-time op: waiting here for the device costs nothing a training step would notice.
  if (const auto bad = first_bad.item<int64_t>(); bad < n)
    fail(op, "'weight' holds ", x.as_strided({1}, {1}, x.storage_offset() + bad).item<float>(), " at [",
         bad / x.shape()[1], ", ", bad % x.shape()[1], "]; only finite weights can be quantised");
  return w;
}

void dequantize_fp8_(const Tensor& out, const Fp8Weight& w) {
  const char* op = "dequantize_fp8";
  check_fp8_weight(w, "weight", op);
  check_floating(op, "out", out);
  TG_CHECK(out.shape() == w.data.shape() && out.is_contiguous(), op, "'out' has shape ", out.shape(),
           out.is_contiguous() ? "" : " (not contiguous)", ", wants ", w.data.shape(), " contiguous");
  TG_CHECK(out.device() == w.device(), op, "'out' is on ", out.device(), " but the weight is on ", w.device());
  detail::check_writable(op, out);
  TG_DISPATCH(out.device(), dequantize_fp8, out, w.data, w.scale_inv, block_rows(w), block_cols(w));
}

Tensor dequantize_fp8(const Fp8Weight& w, DType dtype) {
  TG_CHECK(is_floating_point(dtype), "dequantize_fp8", "dtype ", dtype, ", wants float32, bfloat16 or float64");
  check_fp8_weight(w, "weight", "dequantize_fp8");
  Tensor out = Tensor::empty(w.data.shape(), {dtype, w.device()});
  dequantize_fp8_(out, w);
  return out;
}

Fp8Activation quantize_fp8_activation(const Tensor& x, int64_t tile) {
  const char* op = "quantize_fp8_activation";
  check_defined(op, "x", x);
  TG_CHECK(x.dtype() == kFloat32 || x.dtype() == kBFloat16, op, "'x' has dtype ", x.dtype(),
           ", wants float32 or bfloat16");
  TG_CHECK(x.dim() == 2, op, "'x' has shape ", x.shape(), ", wants [rows, cols]");
  TG_CHECK(tile == 0 || tile == fp8::kBlock, op, "tile ", tile, ", wants 128 (1x128 tiles) or 0 (whole rows)");
  NoGradGuard no_grad;
  const Tensor c = contiguous(x.detach());
  const int64_t rows = c.shape()[0], cols = c.shape()[1];
  const int64_t width = tile == 0 ? std::max<int64_t>(1, cols) : tile, tiles = ceil_div(cols, width);
  Fp8Activation q{Tensor::empty(c.shape(), {kUInt8, c.device()}), Tensor()};
  const Tensor buffer = Tensor::empty({tiles, rows}, {kFloat32, c.device()});
  q.scale = transpose(buffer, 0, 1);
  const Tensor unused = Tensor::empty({1}, {kInt64, c.device()});
  if (c.numel() > 0) TG_DISPATCH(c.device(), quantize_fp8, c, q.data, q.scale, unused, 1, width, false);
  return q;
}

Tensor linear_fp8(const Tensor& x, const Fp8Weight& weight, const Tensor& bias) {
  const char* op = "linear_fp8";  // the group's checks name it; frozen_fp8 checks the weight
  check_floating(op, "x", x);
  LinearSpec spec{Tensor(), bias};
  spec.frozen = frozen_fp8(weight, x.dtype());
  return linear_group(x, {spec}, op)[0];
}

std::shared_ptr<const FrozenWeight> frozen_fp8(const Fp8Weight& weight, DType dtype) {
  check_fp8_weight(weight, "weight", "frozen_fp8");
  TG_CHECK(is_floating_point(dtype), "frozen_fp8", "dtype ", dtype, ", wants a floating dtype");
  return std::make_shared<FrozenFp8>(weight, dtype);
}

}  // namespace tg
