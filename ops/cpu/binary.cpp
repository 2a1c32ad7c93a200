#include "core/detail/strided_loop.h"
#include "core/detail/type_dispatch.h"
#include "ops/binary_kernels.h"

namespace tg::cpu {

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_floating(out.dtype(), "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    T* po = out.data_ptr<T>();
    const T* pa = a.data_ptr<T>();
    const T* pb = b.data_ptr<T>();
    visit_binary(op, [&](auto kind) {
      constexpr BinaryOp OP = decltype(kind)::value;
      strided_loop<3>(out.shape(), {out.strides(), a.strides(), b.strides()}, [&](int64_t n, auto o, auto k) {
        T* d = po + o[0];
        const T* x = pa + o[1];
        const T* y = pb + o[2];
        if (k[1] == 1 && k[2] == 1)  // the common contiguous case, vectorisable
          for (int64_t i = 0; i < n; ++i) d[i] = convert<T>(binary_value<OP, A>(convert<A>(x[i]), convert<A>(y[i])));
        else
          for (int64_t i = 0; i < n; ++i)
            d[i] = convert<T>(binary_value<OP, A>(convert<A>(x[i * k[1]]), convert<A>(y[i * k[2]])));
      });
    });
  });
}

}  // namespace tg::cpu
