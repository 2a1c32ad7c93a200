// CUDA silu_mul (SwiGLU) over contiguous float32 / bfloat16 tensors, computed in float32:
//   out = gate s up, s = sigmoid(gate);   dup = g gate s,  dgate = g up s (1 + gate (1 - s)),
// each gradient only when wanted. One grid-stride pass of 16-byte packs when every pointer is
// 16-byte aligned (scalars otherwise). Traffic: forward reads gate and up once and writes out
// once; backward reads g, gate and up once and writes each wanted gradient once.
#include <initializer_list>
#include <type_traits>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/swiglu_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// Elements [N p, N p + N) as one pack when kPacked (every pointer 16-byte aligned), the tail past
// the last whole pack (or everything) one element at a time.
template <class T, bool kPacked, class F>
__device__ __forceinline__ void for_elements(int64_t n, F&& f) {
  constexpr int N = kPack16<T>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t packs = kPacked ? n / N : 0;
  for (int64_t p = first; p < packs; p += stride) f(p * N, std::integral_constant<int, N>{});
  for (int64_t i = packs * N + first; i < n; i += stride) f(i, std::integral_constant<int, 1>{});
}

template <class T, bool kPacked>
__global__ void silu_mul_kernel(T* out, const T* gate, const T* up, int64_t n) {
  for_elements<T, kPacked>(n, [&](int64_t i, auto width) {
    constexpr int N = decltype(width)::value;
    Pack<T, N> a, b;
    load_pack<Access::plain>(a, gate + i);
    load_pack<Access::plain>(b, up + i);
    float o[N];
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = elem(a, k) * sigmoid(elem(a, k)) * elem(b, k);
    store_pack<Access::plain>(out + i, pack_of<T>(o));
  });
}

template <class T, bool kPacked, bool kGate, bool kUp>
__global__ void silu_mul_backward_kernel(T* dgate, T* dup, const T* g, const T* gate, const T* up, int64_t n) {
  for_elements<T, kPacked>(n, [&](int64_t i, auto width) {
    constexpr int N = decltype(width)::value;
    Pack<T, N> pg, pa, pb;
    load_pack<Access::plain>(pg, g + i);
    load_pack<Access::plain>(pa, gate + i);
    if (kGate) load_pack<Access::plain>(pb, up + i);
    float da[N], db[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float a = elem(pa, k), s = sigmoid(a), gv = elem(pg, k);
      db[k] = gv * a * s;
      da[k] = kGate ? gv * elem(pb, k) * s * (1.f + a * (1.f - s)) : 0.f;
    }
    if (kGate) store_pack<Access::plain>(dgate + i, pack_of<T>(da));
    if (kUp) store_pack<Access::plain>(dup + i, pack_of<T>(db));
  });
}

// Whether every pointer allows 16-byte packs.
inline bool packable(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (p && !aligned(p, 16)) return false;
  return true;
}

}  // namespace

void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) {
  dispatch_gpu_float(out.dtype(), "silu_mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = out.numel();
    T* o = out.data_ptr<T>();
    const T *a = gate.data_ptr<T>(), *b = up.data_ptr<T>();
    const unsigned grid = blocks_for((n + kPack16<T> - 1) / kPack16<T>, kThreads);
    cudaStream_t s = stream_for(out);
    if (packable({o, a, b})) silu_mul_kernel<T, true><<<grid, kThreads, 0, s>>>(o, a, b, n);
    else silu_mul_kernel<T, false><<<grid, kThreads, 0, s>>>(o, a, b, n);
    TG_CUDA_CHECK_LAUNCH("silu_mul");
  });
}

void silu_mul_backward(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up) {
  dispatch_gpu_float(g.dtype(), "silu_mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = g.numel();
    T* da = dgate.defined() ? dgate.data_ptr<T>() : nullptr;
    T* db = dup.defined() ? dup.data_ptr<T>() : nullptr;
    const T *pg = g.data_ptr<T>(), *a = gate.data_ptr<T>(), *b = up.data_ptr<T>();
    const unsigned grid = blocks_for((n + kPack16<T> - 1) / kPack16<T>, kThreads);
    cudaStream_t s = stream_for(g);
    auto launch = [&](auto packed) {
      constexpr bool P = decltype(packed)::value;
      if (da && db) silu_mul_backward_kernel<T, P, true, true><<<grid, kThreads, 0, s>>>(da, db, pg, a, b, n);
      else if (da) silu_mul_backward_kernel<T, P, true, false><<<grid, kThreads, 0, s>>>(da, db, pg, a, b, n);
      else if (db) silu_mul_backward_kernel<T, P, false, true><<<grid, kThreads, 0, s>>>(da, db, pg, a, b, n);
    };
    if (packable({da, db, pg, a, b})) launch(std::true_type{});
    else launch(std::false_type{});
    TG_CUDA_CHECK_LAUNCH("silu_mul_backward");
  });
}

}  // namespace tg::cuda
