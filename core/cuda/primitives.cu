// copy_ (strided, converting), fill_ and accumulate_ on the device. Each is one grid-stride
// pass: read each source element once, write each destination element once.
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/runtime.h"
#include "core/type_dispatch.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

template <class D, class S>
__device__ __forceinline__ D convert_dev(S v) {
  if constexpr (std::is_same_v<D, S>) return v;
  else if constexpr (std::is_same_v<S, bf16>) return static_cast<D>(static_cast<float>(v));
  else if constexpr (std::is_same_v<D, bf16>) return bf16(static_cast<float>(v));
  else return static_cast<D>(v);
}

template <class D, class S>
__global__ void copy_kernel(D* dst, StridedIndex di, const S* src, StridedIndex si, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[di.offset(i)] = convert_dev<D>(src[si.offset(i)]);
}

template <class T>
__global__ void fill_kernel(T* dst, StridedIndex di, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[di.offset(i)] = value;
}

template <class T>
__global__ void accumulate_kernel(T* dst, StridedIndex di, const T* src, StridedIndex si, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T& d = dst[di.offset(i)];
    d = convert_dev<T>(convert_dev<double>(d) + convert_dev<double>(src[si.offset(i)]));
  }
}

StridedIndex index_of(const Tensor& t) { return strided_index(t.shape(), t.strides()); }

}  // namespace

void copy_strided(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  cudaStream_t s = stream_for(dst);
  dispatch_all(dst.dtype(), "copy_", [&](auto dt) {
    using D = typename decltype(dt)::type;
    dispatch_all(src.dtype(), "copy_", [&](auto st) {
      using S = typename decltype(st)::type;
      copy_kernel<D, S><<<blocks_for(n, kThreads), kThreads, 0, s>>>(
          dst.data_ptr<D>(), index_of(dst), src.data_ptr<S>(), index_of(src), n);
      TG_CUDA_CHECK_LAUNCH("copy_");
    });
  });
}

void fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  dispatch_all(dst.dtype(), "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_for(dst)>>>(
        dst.data_ptr<T>(), index_of(dst), convert<T>(value), n);
    TG_CUDA_CHECK_LAUNCH("fill_");
  });
}

void accumulate(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  dispatch_floating(dst.dtype(), "accumulate_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    accumulate_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream_for(dst)>>>(
        dst.data_ptr<T>(), index_of(dst), src.data_ptr<T>(), index_of(src), n);
    TG_CUDA_CHECK_LAUNCH("accumulate_");
  });
}

}  // namespace tg::cuda
