#include "core/strided_loop.h"
#include "core/type_dispatch.h"
#include "ops/unary_kernels.h"

namespace tg::cpu {

void unary(UnaryOp op, double p, const Tensor& out, const Tensor& x) {
  dispatch_floating(x.dtype(), "unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    T* po = out.data_ptr<T>();
    const T* px = x.data_ptr<T>();
    const A pa = static_cast<A>(p);
    visit_unary(op, [&](auto kind) {
      constexpr UnaryOp OP = decltype(kind)::value;
      strided_loop<2>(out.shape(), {out.strides(), x.strides()}, [&](int64_t n, auto o, auto k) {
        T* d = po + o[0];
        const T* s = px + o[1];
        if (k[1] == 1)
          for (int64_t i = 0; i < n; ++i) d[i] = convert<T>(unary_value<OP, A>(convert<A>(s[i]), pa));
        else
          for (int64_t i = 0; i < n; ++i) d[i] = convert<T>(unary_value<OP, A>(convert<A>(s[i * k[1]]), pa));
      });
    });
  });
}

void unary_backward(UnaryOp op, double p, const Tensor& dx, const Tensor& g, const Tensor& v) {
  dispatch_floating(dx.dtype(), "unary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    T* pd = dx.data_ptr<T>();
    const T* pg = g.data_ptr<T>();
    const T* pv = v.defined() ? v.data_ptr<T>() : pg;  // constant derivatives read no value
    const Shape& vs = v.defined() ? v.strides() : g.strides();
    const A pa = static_cast<A>(p);
    visit_unary(op, [&](auto kind) {
      constexpr UnaryOp OP = decltype(kind)::value;
      strided_loop<3>(dx.shape(), {dx.strides(), g.strides(), vs}, [&](int64_t n, auto o, auto k) {
        for (int64_t i = 0; i < n; ++i)
          pd[o[0] + i] = convert<T>(unary_grad<OP, A>(convert<A>(pv[o[2] + i * k[2]]), pa,
                                                          convert<A>(pg[o[1] + i * k[1]])));
      });
    });
  });
}

}  // namespace tg::cpu
