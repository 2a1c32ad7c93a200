// Binary ops on the device: out = a (op) b in float32 registers (float64 for float64 tensors).
// a and b are views of out's shape whose broadcast dims have stride 0. One elementwise pass
// (core/cuda/elementwise.cuh): reads a and b once per output element, writes out once; 16-byte
// vector loads when all three are contiguous and aligned, the strided kernel otherwise (a bias
// broadcast [N, D] + [D] re-reads b from cache).
#include "core/cuda/elementwise.cuh"
#include "core/detail/type_dispatch.h"
#include "ops/binary_kernels.h"

namespace tg::cuda {
namespace {

template <BinaryOp OP, class T>
struct BinaryFn {
  __device__ T operator()(T a, T b) const {
    using A = acc_t<T>;
    return cvt<T>(binary_value<OP, A>(cvt<A>(a), cvt<A>(b)));
  }
};

}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_floating(out.dtype(), "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_binary(op, [&](auto kind) {
      constexpr BinaryOp OP = decltype(kind)::value;
      launch_elementwise<T, T, 2>("binary", out, {a, b}, BinaryFn<OP, T>{});
    });
  });
}

}  // namespace tg::cuda
