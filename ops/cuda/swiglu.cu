// CUDA silu_mul (SwiGLU) over contiguous float32 / bfloat16 tensors, computed in float32:
//   out = gate s up, s = sigmoid(gate);   dup = g gate s,  dgate = g up s (1 + gate (1 - s)),
// each gradient only when wanted. One grid-stride pass of 16-byte packs when every pointer is
// 16-byte aligned (scalars otherwise). Traffic: forward reads gate and up once and writes out
// once; backward reads g, gate and up once and writes each wanted gradient once.
#include "core/cuda/cuda_utils.cuh"
#include "ops/cuda/nn_common.cuh"
#include "ops/swiglu_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

template <class T, int N>
__global__ void silu_mul_kernel(T* out, const T* gate, const T* up, int64_t n) {
  using V = Vec<T, N>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t p = first; p < n / N; p += stride) {
    const V a = reinterpret_cast<const V*>(gate)[p], b = reinterpret_cast<const V*>(up)[p];
    V o;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float x = to_float(a.v[k]);
      o.v[k] = nn::store<T>(x * sigmoid(x) * to_float(b.v[k]));
    }
    reinterpret_cast<V*>(out)[p] = o;
  }
  for (int64_t i = n / N * N + first; i < n; i += stride) {
    const float x = to_float(gate[i]);
    out[i] = nn::store<T>(x * sigmoid(x) * to_float(up[i]));
  }
}

// dgate and / or dup of element k of a pack (or a lone element: N = 1).
template <bool kGate, bool kUp>
__device__ __forceinline__ void grads(float g, float a, float b, float& da, float& db) {
  const float s = sigmoid(a);
  if (kUp) db = g * a * s;
  if (kGate) da = g * b * s * (1.f + a * (1.f - s));
}

template <class T, int N, bool kGate, bool kUp>
__global__ void silu_mul_backward_kernel(T* dgate, T* dup, const T* g, const T* gate, const T* up, int64_t n) {
  using V = Vec<T, N>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t p = first; p < n / N; p += stride) {
    const V vg = reinterpret_cast<const V*>(g)[p], va = reinterpret_cast<const V*>(gate)[p];
    V vb, oa, ob;
    if (kGate) vb = reinterpret_cast<const V*>(up)[p];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float da = 0.f, db = 0.f;
      grads<kGate, kUp>(to_float(vg.v[k]), to_float(va.v[k]), kGate ? to_float(vb.v[k]) : 0.f, da, db);
      if (kGate) oa.v[k] = nn::store<T>(da);
      if (kUp) ob.v[k] = nn::store<T>(db);
    }
    if (kGate) reinterpret_cast<V*>(dgate)[p] = oa;
    if (kUp) reinterpret_cast<V*>(dup)[p] = ob;
  }
  for (int64_t i = n / N * N + first; i < n; i += stride) {
    float da = 0.f, db = 0.f;
    grads<kGate, kUp>(to_float(g[i]), to_float(gate[i]), kGate ? to_float(up[i]) : 0.f, da, db);
    if (kGate) dgate[i] = nn::store<T>(da);
    if (kUp) dup[i] = nn::store<T>(db);
  }
}

// 16 bytes of T when every pointer allows it.
template <class T>
int pack_of(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (p && !aligned_to(p, 16)) return 1;
  return 16 / sizeof(T);
}

}  // namespace

void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) {
  nn::dispatch_float(out.dtype(), "silu_mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int P = 16 / sizeof(T);
    const int64_t n = out.numel();
    T* o = out.data_ptr<T>();
    const T *a = gate.data_ptr<T>(), *b = up.data_ptr<T>();
    const unsigned grid = blocks_for((n + P - 1) / P, kThreads);
    cudaStream_t s = stream_for(out);
    if (pack_of<T>({o, a, b}) == P) silu_mul_kernel<T, P><<<grid, kThreads, 0, s>>>(o, a, b, n);
    else silu_mul_kernel<T, 1><<<grid, kThreads, 0, s>>>(o, a, b, n);
    TG_CUDA_CHECK_LAUNCH("silu_mul");
  });
}

void silu_mul_backward(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up) {
  nn::dispatch_float(g.dtype(), "silu_mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int P = 16 / sizeof(T);
    const int64_t n = g.numel();
    T* da = dgate.defined() ? dgate.data_ptr<T>() : nullptr;
    T* db = dup.defined() ? dup.data_ptr<T>() : nullptr;
    const T *pg = g.data_ptr<T>(), *a = gate.data_ptr<T>(), *b = up.data_ptr<T>();
    const unsigned grid = blocks_for((n + P - 1) / P, kThreads);
    cudaStream_t s = stream_for(g);
    auto launch = [&](auto pack) {
      constexpr int N = decltype(pack)::value;
      if (da && db) silu_mul_backward_kernel<T, N, true, true><<<grid, kThreads, 0, s>>>(da, db, pg, a, b, n);
      else if (da) silu_mul_backward_kernel<T, N, true, false><<<grid, kThreads, 0, s>>>(da, db, pg, a, b, n);
      else if (db) silu_mul_backward_kernel<T, N, false, true><<<grid, kThreads, 0, s>>>(da, db, pg, a, b, n);
    };
    if (pack_of<T>({da, db, pg, a, b}) == P) launch(std::integral_constant<int, P>{});
    else launch(std::integral_constant<int, 1>{});
    TG_CUDA_CHECK_LAUNCH("silu_mul_backward");
  });
}

}  // namespace tg::cuda
