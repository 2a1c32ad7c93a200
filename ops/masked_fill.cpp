#include "ops/masked_fill.h"

#include "core/autograd.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/masked_fill_kernels.h"
#include "ops/shape.h"

namespace tg {
namespace {

constexpr const char* kOp = "masked_fill";

// dx = masked_fill(g, mask, 0): filled positions did not come from x. Saves the mask only (in
// its own, unbroadcast shape).
struct MaskedFillBackward final : Node {
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    Tensor dx = Tensor::empty(g[0].shape(), g[0].options());
    if (dx.numel() > 0)
      TG_DISPATCH(dx.device(), masked_fill, dx, g[0], expand(unpack(0), dx.shape()), 0.0);
    return {dx};
  }
};

// Whether `from` broadcasts to exactly `to` (NumPy rules, trailing dims aligned).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_floating(kOp, "x", x);
  check_defined(kOp, "mask", mask);
  TG_CHECK(mask.dtype() == kBool || mask.dtype() == kInt32 || mask.dtype() == kInt64, kOp,
           "'mask' must be bool or an integer type (int32, int64), got ", mask.dtype());
  check_same(kOp, {{"x", x}, {"mask", mask}}, /*same_dtype=*/false);
  TG_CHECK(broadcasts_to(mask.shape(), x.shape()), kOp, "'mask' of shape ", mask.shape(),
           " does not broadcast to the shape of 'x' ", x.shape());
  Tensor m;
  {
    NoGradGuard no_grad;
    m = expand(mask, x.shape());  // stride 0 along the repeated dims: no copy
  }
  Tensor out = Tensor::empty(x.shape(), x.options());
  if (out.numel() > 0) TG_DISPATCH(x.device(), masked_fill, out, x, m, value);
  if (auto n = record<MaskedFillBackward>({{"x", x}}, {out})) n->saved = {SavedTensor(mask, "mask")};
  return out;
}

}  // namespace tg
