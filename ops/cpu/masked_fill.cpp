// CPU masked_fill: one strided pass (read x and mask, write out).
#include "core/detail/strided_loop.h"
#include "core/detail/type_dispatch.h"
#include "ops/masked_fill_kernels.h"

namespace tg::cpu {
namespace {

template <class F>
void dispatch_mask(DType t, F&& f) {
  switch (t) {
    case kBool: return f(type_tag<bool>{});
    case kInt32: return f(type_tag<int32_t>{});
    case kInt64: return f(type_tag<int64_t>{});
    default: fail("masked_fill", "'mask' must be bool or an integer type, got ", t);
  }
}

}  // namespace

void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
  dispatch_floating(x.dtype(), "masked_fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_mask(mask.dtype(), [&](auto mtag) {
      using M = typename decltype(mtag)::type;
      T* po = out.data_ptr<T>();
      const T* px = x.data_ptr<T>();
      const M* pm = mask.data_ptr<M>();
      const T v = convert<T>(value);
      strided_loop<3>(out.shape(), {out.strides(), x.strides(), mask.strides()}, [&](int64_t n, auto o, auto k) {
        for (int64_t j = 0; j < n; ++j)
          po[o[0] + j * k[0]] = pm[o[2] + j * k[2]] != M(0) ? v : px[o[1] + j * k[1]];
      });
    });
  });
}

}  // namespace tg::cpu
