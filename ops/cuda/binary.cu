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

// The value in TI's accumulator type, rounded once into TO.
template <BinaryOp OP, class TO, class TI>
struct BinaryFn {
  __device__ TO operator()(TI a, TI b) const {
    using A = acc_t<TI>;
    return cvt<TO>(binary_value<OP, A>(cvt<A>(a), cvt<A>(b)));
  }
};

}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.dtype() == kBFloat16 && a.dtype() == kFloat32) {  // float32 operands rounded into bfloat16
    visit_binary(op, [&](auto kind) {
      launch_elementwise<bf16, float, 2>("binary", out, {a, b}, BinaryFn<decltype(kind)::value, bf16, float>{});
    });
    return;
  }
  dispatch_floating(out.dtype(), "binary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_binary(op, [&](auto kind) {
      constexpr BinaryOp OP = decltype(kind)::value;
      launch_elementwise<T, T, 2>("binary", out, {a, b}, BinaryFn<OP, T, T>{});
    });
  });
}

}  // namespace tg::cuda
