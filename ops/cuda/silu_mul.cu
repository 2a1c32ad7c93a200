// CUDA silu_mul (SwiGLU) over [rows, cols] float32 / bfloat16 tensors, computed in float32:
//   out = gate s up, s = sigmoid(gate);   dup = g gate s,  dgate = g up s (1 + gate (1 - s)),
// each gradient only when wanted. gate and up are read at their row strides (column blocks of one
// projection, no copy). One grid-stride pass of 16-byte packs when every pointer, cols and the
// row strides allow them (scalars otherwise). Traffic: forward reads gate and up once and writes out
// once; backward reads g, gate and up once and writes each wanted gradient once.
#include <initializer_list>
#include <type_traits>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/silu_mul_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// The rows x cols elements as f(i, r, c) (i the contiguous index, r and c its row and column):
// packs of N when kPacked (cols a multiple of N), else one at a time.
template <class T, bool kPacked, class F>
__device__ __forceinline__ void for_elements(int64_t rows, int64_t cols, F&& f) {
  constexpr int N = kPacked ? kPack16<T> : 1;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t n = rows * cols / N;
  for (int64_t p = first; p < n; p += stride) {
    const int64_t i = p * N, r = i / cols;
    f(i, r, i - r * cols, std::integral_constant<int, N>{});
  }
}

template <class T, bool kPacked>
__global__ void silu_mul_kernel(T* out, const T* gate, const T* up, int64_t rows, int64_t cols, int64_t lda,
                                int64_t ldb) {
  for_elements<T, kPacked>(rows, cols, [&](int64_t i, int64_t r, int64_t c, auto width) {
    constexpr int N = decltype(width)::value;
    Pack<T, N> a, b;
    load_pack<Access::plain>(a, gate + r * lda + c);
    load_pack<Access::plain>(b, up + r * ldb + c);
    float o[N];
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = elem(a, k) * sigmoid(elem(a, k)) * elem(b, k);
    store_pack<Access::plain>(out + i, pack_of<T>(o));
  });
}

template <class T, bool kPacked, bool kGate, bool kUp>
__global__ void silu_mul_backward_kernel(T* dgate, T* dup, const T* g, const T* gate, const T* up, int64_t rows,
                                         int64_t cols, int64_t lda, int64_t ldb) {
  for_elements<T, kPacked>(rows, cols, [&](int64_t i, int64_t r, int64_t c, auto width) {
    constexpr int N = decltype(width)::value;
    Pack<T, N> pg, pa, pb;
    load_pack<Access::plain>(pg, g + i);
    load_pack<Access::plain>(pa, gate + r * lda + c);
    if (kGate) load_pack<Access::plain>(pb, up + r * ldb + c);
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

// Whether every pointer, the row length and the row strides allow 16-byte packs of T.
template <class T>
bool packable(std::initializer_list<const void*> ptrs, std::initializer_list<int64_t> lengths) {
  for (const void* p : ptrs)
    if (p && !aligned(p, 16)) return false;
  for (int64_t n : lengths)
    if (n % kPack16<T> != 0) return false;
  return true;
}

}  // namespace

void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) {
  dispatch_gpu_float(out.dtype(), "silu_mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t rows = gate.shape()[0], cols = gate.shape()[1], lda = gate.strides()[0], ldb = up.strides()[0];
    T* o = out.data_ptr<T>();
    const T *a = gate.data_ptr<T>(), *b = up.data_ptr<T>();
    const unsigned grid = blocks_for((rows * cols + kPack16<T> - 1) / kPack16<T>, kThreads);
    cudaStream_t s = stream_for(out);
    if (packable<T>({o, a, b}, {cols, lda, ldb}))
      silu_mul_kernel<T, true><<<grid, kThreads, 0, s>>>(o, a, b, rows, cols, lda, ldb);
    else
      silu_mul_kernel<T, false><<<grid, kThreads, 0, s>>>(o, a, b, rows, cols, lda, ldb);
    TG_CUDA_CHECK_LAUNCH("silu_mul");
  });
}

void silu_mul_backward(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up) {
  dispatch_gpu_float(g.dtype(), "silu_mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t rows = gate.shape()[0], cols = gate.shape()[1], lda = gate.strides()[0], ldb = up.strides()[0];
    T* da = dgate.defined() ? dgate.data_ptr<T>() : nullptr;
    T* db = dup.defined() ? dup.data_ptr<T>() : nullptr;
    const T *pg = g.data_ptr<T>(), *a = gate.data_ptr<T>(), *b = up.data_ptr<T>();
    const unsigned grid = blocks_for((rows * cols + kPack16<T> - 1) / kPack16<T>, kThreads);
    cudaStream_t s = stream_for(g);
    auto launch = [&](auto packed) {
      constexpr bool P = decltype(packed)::value;
      auto run = [&](auto kernel) { kernel<<<grid, kThreads, 0, s>>>(da, db, pg, a, b, rows, cols, lda, ldb); };
      if (da && db) run(silu_mul_backward_kernel<T, P, true, true>);
      else if (da) run(silu_mul_backward_kernel<T, P, true, false>);
      else if (db) run(silu_mul_backward_kernel<T, P, false, true>);
    };
    if (packable<T>({da, db, pg, a, b}, {cols, lda, ldb})) launch(std::true_type{});
    else launch(std::false_type{});
    TG_CUDA_CHECK_LAUNCH("silu_mul_backward");
  });
}

}  // namespace tg::cuda
