#include "ops/index_copy.h"

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/detail/type_dispatch.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/index_copy_kernels.h"
#include "ops/shape.h"

namespace tg {

void index_copy_(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  constexpr const char* kOp = "index_copy_";
  check_defined(kOp, "self", self);
  check_defined(kOp, "index", index);
  check_defined(kOp, "source", source);
  const int64_t n = self.dim();
  TG_CHECK(n >= 1 && dim >= -n && dim < n, kOp, "dim ", dim, " is out of range for self of shape ", self.shape());
  if (dim < 0) dim += n;
  TG_CHECK(index.dim() == 1 && (index.dtype() == kInt32 || index.dtype() == kInt64), kOp,
           "index must be 1-D int32 or int64, got ", index.shape(), " ", index.dtype());
  Shape want = self.shape();
  want[static_cast<size_t>(dim)] = index.numel();
  TG_CHECK(source.shape() == want && source.dtype() == self.dtype(), kOp, "source is ", source.shape(), " ",
           source.dtype(), ", wants ", want, " ", self.dtype(), " (self ", self.shape(), " with index's ",
           index.numel(), " entries along dim ", dim, ")");
  check_same(kOp, {{"self", self}, {"index", index}, {"source", source}}, /*same_dtype=*/false);
  TG_CHECK(self.is_contiguous(), kOp, "self must be contiguous (it is written in place), got strides ",
           self.strides(), " for shape ", self.shape());
  detail::check_writable(kOp, self);
  TG_CHECK(!grad_mode_enabled() || !(self.requires_grad() || source.requires_grad()), kOp,
           "is not differentiable: self or source requires grad (run it under NoGradGuard)");
  const int64_t size = self.shape()[static_cast<size_t>(dim)];
  if (self.device().is_cpu()) {
    dispatch_index(index.dtype(), kOp, [&](auto tag) {
      using I = typename decltype(tag)::type;
      const Tensor held = contiguous(index);
      const I* p = held.template data_ptr<I>();
      for (int64_t i = 0; i < index.numel(); ++i)
        TG_CHECK(p[i] >= 0 && p[i] < size, kOp, "index ", static_cast<int64_t>(p[i]), " (entry ", i,
                 ") is out of range for dim ", dim, " of size ", size);
    });
  }
  self.bump_version();
  if (source.numel() == 0) return;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= self.shape()[static_cast<size_t>(d)];
  for (int64_t d = dim + 1; d < n; ++d) inner *= self.shape()[static_cast<size_t>(d)];
  NoGradGuard no_grad;  // the contiguous copies
  TG_DISPATCH(self.device(), index_copy, self, contiguous(index), contiguous(source), outer, size, inner);
}

}  // namespace tg
