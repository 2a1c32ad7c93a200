// CPU versions of copy_, fill_ and accumulate_: one strided loop each.
#include "core/primitives.h"
#include "core/detail/strided_loop.h"
#include "core/detail/type_dispatch.h"

namespace tg::detail {

void cpu_copy(const Tensor& dst, const Tensor& src) {
  dispatch_all(dst.dtype(), "copy_", [&](auto dt) {
    using D = typename decltype(dt)::type;
    dispatch_all(src.dtype(), "copy_", [&](auto st) {
      using S = typename decltype(st)::type;
      D* d = dst.data_ptr<D>();
      const S* s = src.data_ptr<S>();
      strided_loop<2>(dst.shape(), {dst.strides(), src.strides()}, [&](int64_t n, auto o, auto k) {
        for (int64_t i = 0; i < n; ++i) d[o[0] + i * k[0]] = convert<D>(s[o[1] + i * k[1]]);
      });
    });
  });
}

void cpu_fill(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = convert<T>(value);
    T* d = dst.data_ptr<T>();
    strided_loop<1>(dst.shape(), {dst.strides()}, [&](int64_t n, auto o, auto k) {
      for (int64_t i = 0; i < n; ++i) d[o[0] + i * k[0]] = v;
    });
  });
}

void cpu_accumulate(const Tensor& dst, const Tensor& src) {
  dispatch_floating(dst.dtype(), "accumulate_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    T* d = dst.data_ptr<T>();
    const T* s = src.data_ptr<T>();
    strided_loop<2>(dst.shape(), {dst.strides(), src.strides()}, [&](int64_t n, auto o, auto k) {
      for (int64_t i = 0; i < n; ++i) {
        T& x = d[o[0] + i * k[0]];
        x = convert<T>(convert<A>(x) + convert<A>(s[o[1] + i * k[1]]));
      }
    });
  });
}

}  // namespace tg::detail
