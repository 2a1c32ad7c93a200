// Unary ops on the device: out = f(x; p) and dx = g * f'(v), the math of ops/elementwise_math.h
// evaluated in float32 registers (float64 for float64 tensors). One elementwise pass each
// (core/cuda/elementwise.cuh): forward reads x and writes out; backward reads g (and v) and
// writes dx; 16-byte vector loads when every operand is contiguous and aligned.
#include "core/cuda/elementwise.cuh"
#include "core/detail/type_dispatch.h"
#include "ops/unary_kernels.h"

namespace tg::cuda {
namespace {

template <UnaryOp OP, class T>
struct UnaryFn {
  acc_t<T> p;
  __device__ T operator()(T x) const {
    using A = acc_t<T>;
    return cvt<T>(unary_value<OP, A>(cvt<A>(x), p));
  }
};

template <UnaryOp OP, class T>
struct UnaryGradFn {
  acc_t<T> p;
  __device__ T operator()(T g, T v) const {
    using A = acc_t<T>;
    return cvt<T>(unary_grad<OP, A>(cvt<A>(v), p, cvt<A>(g)));
  }
};

}  // namespace

void unary(UnaryOp op, double p, const Tensor& out, const Tensor& x) {
  dispatch_floating(x.dtype(), "unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary(op, [&](auto kind) {
      constexpr UnaryOp OP = decltype(kind)::value;
      launch_elementwise<T, T, 1>("unary", out, {x}, UnaryFn<OP, T>{static_cast<acc_t<T>>(p)});
    });
  });
}

void unary_backward(UnaryOp op, double p, const Tensor& dx, const Tensor& g, const Tensor& v) {
  dispatch_floating(dx.dtype(), "unary_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_unary(op, [&](auto kind) {
      constexpr UnaryOp OP = decltype(kind)::value;
      // Constant derivatives read no value: pass g twice (the second read is never used).
      const Tensor& val = v.defined() ? v : g;
      launch_elementwise<T, T, 2>("unary_backward", dx, {g, val}, UnaryGradFn<OP, T>{static_cast<acc_t<T>>(p)});
    });
  });
}

}  // namespace tg::cuda
