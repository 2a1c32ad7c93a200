// copy_ (strided, converting), fill_ and accumulate_ on the device.
//   copy:       same dtype and both contiguous -> cudaMemcpyAsync (device to device); otherwise
//               one elementwise pass (vectorised when both are contiguous and aligned, strided
//               otherwise): reads each source element once, writes each destination element once.
//   fill:       cudaMemsetAsync when the value's bytes are all zero and dst is contiguous;
//               otherwise one elementwise pass writing each element once.
//   accumulate: dst += src in one pass (reads dst and src, writes dst), float32 arithmetic for
//               float32/bfloat16 as on the CPU.
#include <cstring>

#include "core/cuda/elementwise.cuh"
#include "core/cuda/runtime.h"
#include "core/detail/type_dispatch.h"

namespace tg::cuda {
namespace {

template <class D, class S>
struct ConvertFn {
  __device__ D operator()(S v) const { return cvt<D>(v); }
};

template <class T>
struct FillFn {
  T value;
  __device__ T operator()() const { return value; }
};

template <class T>
struct AddFn {
  __device__ T operator()(T a, T b) const {
    using A = acc_t<T>;
    return cvt<T>(cvt<A>(a) + cvt<A>(b));
  }
};

}  // namespace

void copy_strided(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  TG_CHECK(dst.device() == src.device(), "copy_", "kernel wants one device, got ", dst.device(),
           " <- ", src.device());
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    TG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDeviceToDevice,
                                  stream_for(dst)));
    return;
  }
  dispatch_all(dst.dtype(), "copy_", [&](auto dt) {
    using D = typename decltype(dt)::type;
    dispatch_all(src.dtype(), "copy_", [&](auto st) {
      using S = typename decltype(st)::type;
      launch_elementwise<D, S, 1>("copy_", dst, {src}, ConvertFn<D, S>{});
    });
  });
}

void fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  dispatch_all(dst.dtype(), "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = convert<T>(value);
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    bool zero_bytes = true;
    for (unsigned char b : bytes) zero_bytes = zero_bytes && b == 0;
    if (zero_bytes && dst.is_contiguous()) {
      TG_CUDA_CHECK(cudaMemsetAsync(dst.data_ptr(), 0, dst.nbytes(), stream_for(dst)));
      return;
    }
    launch_elementwise<T, T, 0>("fill_", dst, {}, FillFn<T>{v});
  });
}

void accumulate(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  dispatch_floating(dst.dtype(), "accumulate_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise<T, T, 2>("accumulate_", dst, {dst, src}, AddFn<T>{});
  });
}

}  // namespace tg::cuda
