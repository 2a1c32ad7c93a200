#include "core/detail/strided_loop.h"
#include "core/detail/type_dispatch.h"
#include "ops/binary_kernels.h"

namespace tg::cpu {

namespace {

// out = a (op) b in I's accumulator type, rounded once into O.
template <class O, class I>
void binary_loop(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  using A = acc_t<I>;
  O* po = out.data_ptr<O>();
  const I* pa = a.data_ptr<I>();
  const I* pb = b.data_ptr<I>();
  visit_binary(op, [&](auto kind) {
    constexpr BinaryOp OP = decltype(kind)::value;
    strided_loop<3>(out.shape(), {out.strides(), a.strides(), b.strides()}, [&](int64_t n, auto o, auto k) {
      O* d = po + o[0];
      const I* x = pa + o[1];
      const I* y = pb + o[2];
      if (k[1] == 1 && k[2] == 1)  // the common contiguous case, vectorisable
        for (int64_t i = 0; i < n; ++i) d[i] = convert<O>(binary_value<OP, A>(convert<A>(x[i]), convert<A>(y[i])));
      else
        for (int64_t i = 0; i < n; ++i)
          d[i] = convert<O>(binary_value<OP, A>(convert<A>(x[i * k[1]]), convert<A>(y[i * k[2]])));
    });
  });
}

}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dtype() == kBFloat16 && a.dtype() == kFloat32) return binary_loop<bf16, float>(op, out, a, b);
  dispatch_floating(out.dtype(), "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_loop<T, T>(op, out, a, b);
  });
}

}  // namespace tg::cpu
