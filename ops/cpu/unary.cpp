// CPU unary ops: the shared formulas of ops/elementwise_math.h with a vectorisable exp for
// float (fast_exp; std::exp is a scalar libm call GCC will not vectorise), so sigmoid, silu, exp
// and gelu's backward run at vector width. float64 keeps std::exp (the gradcheck reference).
// Contiguous runs get their own loops (what the compiler vectorises); other strides the
// general ones.
#include <cmath>

#include "core/detail/fast_exp.h"
#include "core/detail/strided_loop.h"
#include "core/detail/type_dispatch.h"
#include "ops/unary_kernels.h"

namespace tg::cpu {
namespace {

struct CpuMath {
  static TG_ALWAYS_INLINE float exp(float x) { return fast_exp(x); }
  static TG_ALWAYS_INLINE double exp(double x) { return std::exp(x); }
};

}  // namespace

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
        if (k[0] == 1 && k[1] == 1)
          for (int64_t i = 0; i < n; ++i) d[i] = convert<T>(unary_value<OP, A, CpuMath>(convert<A>(s[i]), pa));
        else
          for (int64_t i = 0; i < n; ++i)
            d[i * k[0]] = convert<T>(unary_value<OP, A, CpuMath>(convert<A>(s[i * k[1]]), pa));
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
        T* d = pd + o[0];
        const T* gg = pg + o[1];
        const T* vv = pv + o[2];
        if (k[0] == 1 && k[1] == 1 && k[2] == 1)
          for (int64_t i = 0; i < n; ++i)
            d[i] = convert<T>(unary_grad<OP, A, CpuMath>(convert<A>(vv[i]), pa, convert<A>(gg[i])));
        else
          for (int64_t i = 0; i < n; ++i)
            d[i * k[0]] =
                convert<T>(unary_grad<OP, A, CpuMath>(convert<A>(vv[i * k[2]]), pa, convert<A>(gg[i * k[1]])));
      });
    });
  });
}

}  // namespace tg::cpu
