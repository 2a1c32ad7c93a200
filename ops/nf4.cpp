#include "ops/nf4.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/shape.h"
#include "ops/cast.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/detail/matrix_gemm.h"
#include "ops/lora_linear.h"
#include "ops/nf4_kernels.h"
#include "ops/nf4_math.h"
#include "ops/shape.h"

namespace tg {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool valid_blocksize(int64_t b) {
  for (int64_t ok : {32, 64, 128, 256, 512, 1024, 2048, 4096})
    if (b == ok) return true;
  return false;
}

// One piece of the state: defined, of `dtype`, 1-D of `numel` elements, on `device`.
void check_piece(const char* op, const std::string& name, const Tensor& t, DType dtype, int64_t numel,
                 Device device, bool any_2d_column = false) {
  TG_CHECK(t.defined(), op, "'", name, "' is missing");
  TG_CHECK(t.dtype() == dtype, op, "'", name, "' has dtype ", t.dtype(), ", wants ", dtype);
  // bitsandbytes stores the packed weight as a column [(n + 1) / 2, 1].
  const bool shape_ok = (t.dim() == 1 || (any_2d_column && t.dim() == 2 && t.shape()[1] == 1)) && t.numel() == numel;
  TG_CHECK(shape_ok, op, "'", name, "' has shape ", t.shape(), ", wants ", numel, " values", any_2d_column ?
           " ([n] or [n, 1])" : "");
  TG_CHECK(t.device() == device, op, "'", name, "' is on ", t.device(), " but the packed weight is on ", device);
  TG_CHECK(t.is_contiguous(), op, "'", name, "' must be contiguous");
}

// The float32 block scales the kernels read: the absmax itself, or its codes with the nested state.
struct Scales {
  Tensor absmax, nested_absmax, nested_quant_map;
};

// W in `dtype`: dequantised into the workspace when there is one.
Tensor dequantized_weight(const QuantState4bit& q, DType dtype, const Tensor& workspace) {
  const int64_t out = q.shape[0], in = q.shape[1];
  if (!workspace.defined()) return dequantize_4bit(q, dtype);
  Tensor w = workspace.as_strided({out, in}, contiguous_strides({out, in}), 0);
  dequantize_4bit_(w, q);
  return w;
}

// The 4-bit weight as lora_linear's base: W dequantised right before each product (again for dx,
// so nothing of W's size is kept between forward and backward).
class Frozen4bit final : public FrozenWeight {
 public:
  Frozen4bit(QuantState4bit q, Tensor workspace, DType dtype)
      : q_(std::move(q)), workspace_(std::move(workspace)), dtype_(dtype) {}
  int64_t out_features() const override { return q_.shape[0]; }
  int64_t in_features() const override { return q_.shape[1]; }
  Device device() const override { return q_.device(); }
  DType dtype() const override { return dtype_; }
  const char* format() const override { return "4-bit"; }
  void forward(const Tensor& y, const Tensor& x, double beta, std::any&) const override {
    matrix::gemm(y, x, transpose(dequantized_weight(q_, x.dtype(), workspace_), 0, 1), 1.0, beta);
  }
  void dx(const Tensor& dx, const Tensor& dy, double beta) const override {
    matrix::gemm(dx, dy, dequantized_weight(q_, dy.dtype(), workspace_), 1.0, beta);
  }

 private:
  QuantState4bit q_;
  Tensor workspace_;
  DType dtype_;
};

}  // namespace

int64_t QuantState4bit::numel() const { return numel_of(shape); }

QuantState4bit QuantState4bit::to(Device device) const {
  QuantState4bit q = *this;
  for (Tensor* t : {&q.packed, &q.absmax, &q.quant_map, &q.nested_absmax, &q.nested_quant_map})
    if (t->defined()) *t = tg::to(*t, device);
  return q;
}

void check_quant_state(const QuantState4bit& q, const std::string& name, const char* op) {
  TG_CHECK(q.quant_type == "nf4" || q.quant_type == "fp4", op, "'", name, "' has quant_type '", q.quant_type,
           "', wants nf4 or fp4");
  TG_CHECK(valid_blocksize(q.blocksize), op, "'", name, "' has blocksize ", q.blocksize,
           ", wants one of 32, 64, ..., 4096 (a power of two)");
  const int64_t n = q.numel();
  TG_CHECK(n > 0, op, "'", name, "' has shape ", q.shape, ", wants at least one element");
  TG_CHECK(q.packed.defined(), op, "'", name, "' (the packed 4-bit values) is missing");
  const Device dev = q.packed.device();
  check_piece(op, name, q.packed, kUInt8, (n + 1) / 2, dev, true);
  const int64_t blocks = ceil_div(n, q.blocksize);
  check_piece(op, name + ".absmax", q.absmax, q.nested() ? kUInt8 : kFloat32, blocks, dev);
  check_piece(op, name + ".quant_map", q.quant_map, kFloat32, 16, dev);
  TG_CHECK(q.nested() || !q.nested_quant_map.defined(), op, "'", name,
           ".nested_quant_map' is given without nested_absmax");
  if (!q.nested()) return;
  check_piece(op, name + ".nested_absmax", q.nested_absmax, kFloat32, ceil_div(blocks, nf4::kNestedBlocksize), dev);
  check_piece(op, name + ".nested_quant_map", q.nested_quant_map, kFloat32, 256, dev);
  TG_CHECK(std::isfinite(q.offset), op, "'", name, "' has nested_offset ", q.offset, ", wants a finite number");
}

const std::vector<float>& dynamic_map_8bit() {
  // create_dynamic_map's construction in float32: for i in 0..6, the midpoints of
  // linspace(0.1, 1, 2^i + 1) (torch's scalar formula: up from start, the second half down from
  // end) times 10^(i - 6), both signs; then 0 and 1, sorted.
  static const std::vector<float> map = [] {
    std::vector<float> v;
    for (int i = 0; i < 7; ++i) {
      const int steps = (1 << i) + 1, half = steps / 2;
      const float start = 0.1f, end = 1.0f, step = (end - start) / static_cast<float>(steps - 1);
      std::vector<float> b(steps);
      for (int k = 0; k < steps; ++k)
        b[k] = k < half ? start + step * static_cast<float>(k) : end - step * static_cast<float>(steps - k - 1);
      const float scale = static_cast<float>(std::pow(10.0, i - 6));
      for (int k = 0; k + 1 < steps; ++k) v.push_back(scale * ((b[k] + b[k + 1]) / 2.0f));
      for (int k = 0; k + 1 < steps; ++k) v.push_back(-scale * ((b[k] + b[k + 1]) / 2.0f));
    }
    v.push_back(0.0f);
    v.push_back(1.0f);
    std::sort(v.begin(), v.end());
    return v;
  }();
  return map;
}

QuantState4bit quantize_4bit(const Tensor& weight, const std::string& quant_type, bool double_quant,
                             int64_t blocksize) {
  const char* op = "quantize_4bit";
  check_defined(op, "weight", weight);
  TG_CHECK(weight.dtype() == kFloat32 || weight.dtype() == kBFloat16, op, "'weight' has dtype ", weight.dtype(),
           ", wants float32 or bfloat16");
  TG_CHECK(quant_type == "nf4" || quant_type == "fp4", op, "quant_type '", quant_type, "', wants nf4 or fp4");
  TG_CHECK(valid_blocksize(blocksize), op, "blocksize ", blocksize, ", wants one of 32, 64, ..., 4096");
  TG_CHECK(weight.numel() > 0, op, "'weight' is empty (shape ", weight.shape(), ")");
  NoGradGuard no_grad;
  const Device device = weight.device();
  const Tensor x = contiguous(weight.detach());
  const int64_t n = x.numel(), blocks = ceil_div(n, blocksize);
  QuantState4bit q;
  q.shape = weight.shape();
  q.dtype = weight.dtype();
  q.quant_type = quant_type;
  q.blocksize = blocksize;
  q.packed = Tensor::empty({(n + 1) / 2}, {kUInt8, device});
  Tensor absmax = Tensor::empty({blocks}, {kFloat32, device});
  const Tensor first_bad = full({1}, static_cast<double>(n), {kInt64, device});
  TG_DISPATCH(device, quantize_4bit, x, q.packed, absmax, first_bad, blocksize, quant_type == "fp4");
  // A load-time op: waiting here for the device costs nothing a training step would notice.
  if (const auto bad = first_bad.item<int64_t>(); bad < n)
    fail(op, "'weight' holds ", x.as_strided({1}, {1}, x.storage_offset() + bad).item<float>(), " at element ", bad,
         " (flattened); only finite weights can be quantised");
  const float* map = quant_type == "fp4" ? nf4::kFP4Map : nf4::kNF4Map;
  q.quant_map = from_vector(std::vector<float>(map, map + 16), {16}, device);
  if (!double_quant) {
    q.absmax = absmax;
    return q;
  }
  // bitsandbytes: offset = absmax.mean(), the rest as 8-bit codes of the dynamic map. On the host
  // (absmax is 1/64 of the weight's values): the mean is summed in float64 in one order, so a GPU
  // weight gets the CPU's bits.
  const Tensor host = tg::to(absmax, Device::cpu());
  const float* a = host.data_ptr<float>();
  double total = 0;
  for (int64_t b = 0; b < blocks; ++b) total += a[b];
  q.offset = static_cast<float>(total / static_cast<double>(blocks));
  Tensor centred = Tensor::empty({blocks}, {kFloat32});
  for (int64_t b = 0; b < blocks; ++b) centred.data_ptr<float>()[b] = a[b] - q.offset;
  const Tensor code = from_vector(dynamic_map_8bit(), {256});
  Tensor codes = Tensor::empty({blocks}, {kUInt8});
  Tensor nested = Tensor::empty({ceil_div(blocks, nf4::kNestedBlocksize)}, {kFloat32});
  cpu::quantize_8bit_blockwise(centred, code, codes, nested, nf4::kNestedBlocksize);
  q.absmax = tg::to(codes, device);
  q.nested_absmax = tg::to(nested, device);
  q.nested_quant_map = tg::to(code, device);
  return q;
}

void dequantize_4bit_(const Tensor& out, const QuantState4bit& q) {
  const char* op = "dequantize_4bit";
  check_quant_state(q, "weight", op);
  check_floating(op, "out", out);
  TG_CHECK(out.numel() == q.numel() && out.is_contiguous(), op, "'out' has shape ", out.shape(),
           (out.is_contiguous() ? "" : " (not contiguous)"), ", wants ", q.numel(), " contiguous elements");
  TG_CHECK(out.device() == q.device(), op, "'out' is on ", out.device(), " but the weight is on ", q.device());
  detail::check_writable(op, out);
  TG_DISPATCH(out.device(), dequantize_4bit, out, q.packed, q.absmax, q.quant_map, q.nested_absmax,
              q.nested_quant_map, q.offset, q.blocksize);
}

Tensor dequantize_4bit(const QuantState4bit& q, DType dtype) {
  TG_CHECK(is_floating_point(dtype), "dequantize_4bit", "dtype ", dtype, ", wants float32, bfloat16 or float64");
  check_quant_state(q, "weight", "dequantize_4bit");
  Tensor out = Tensor::empty(q.shape, {dtype, q.device()});
  dequantize_4bit_(out, q);
  return out;
}

Tensor linear_4bit(const Tensor& x, const QuantState4bit& weight, const Tensor& bias, const Tensor& workspace) {
  const char* op = "linear_4bit";  // the group's checks name it; frozen_4bit checks the weight and workspace
  check_floating(op, "x", x);
  LinearSpec spec{Tensor(), bias};
  spec.frozen = frozen_4bit(weight, x.dtype(), workspace);
  return linear_group(x, {spec}, op)[0];
}

std::shared_ptr<const FrozenWeight> frozen_4bit(const QuantState4bit& weight, DType dtype, const Tensor& workspace) {
  const char* op = "frozen_4bit";
  check_quant_state(weight, "weight", op);
  TG_CHECK(weight.shape.size() == 2, op, "the quantised weight has shape ", weight.shape, ", wants [out, in]");
  TG_CHECK(is_floating_point(dtype), op, "dtype ", dtype, ", wants a floating dtype");
  if (workspace.defined()) {
    TG_CHECK(workspace.dtype() == dtype && workspace.device() == weight.device(), op, "workspace is ",
             workspace.dtype(), " on ", workspace.device(), ", wants ", dtype, " on ", weight.device());
    TG_CHECK(workspace.is_contiguous() && workspace.numel() >= weight.numel(), op, "workspace has ",
             workspace.numel(), " elements", workspace.is_contiguous() ? "" : " (not contiguous)", ", wants at least ",
             weight.numel());
  }
  return std::make_shared<Frozen4bit>(weight, workspace, dtype);
}

}  // namespace tg
