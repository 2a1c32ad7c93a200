// Reductions on the device: sum over any dims, max (+ first index) along one dim, max's
// backward. All are deterministic: a launch's shape depends only on the tensor shapes and the
// device, every thread adds its elements in a fixed order and partial results are combined in
// a fixed tree (no atomics), so a rerun gives the same bits.
//
// The reduced dims are sorted by stride and coalesced, then one of two kernels runs:
//   rows: the reduced elements of an output are contiguous (sum over the last dims): a warp or
//         a block per output, 16-byte loads when aligned. Few long rows are split in chunks
//         whose partial sums a second launch adds.
//   cols: anything else, typically reducing leading dims (the bias gradient: sum over the rows
//         of [N, D]): one thread per output walks its reduced elements, neighbouring threads
//         read neighbouring addresses. Few outputs with long reductions are split likewise.
// Memory traffic: x read once, out written once (plus the small partial buffer when split).
#include <algorithm>
#include <numeric>

#include "core/cuda/elementwise.cuh"
#include "core/cuda/runtime.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "core/type_dispatch.h"
#include "ops/reduce_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

// Sums `v` over the TPR threads of a row (a warp, or the whole 256-thread block); the result
// is valid in thread 0 of the row. Fixed butterfly order: deterministic.
template <int TPR, class A>
__device__ __forceinline__ A row_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (TPR > 32) {
    __shared__ A partial[TPR / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < TPR / 32 ? partial[lane] : A(0);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

// Row reduction: out[row * S + chunk] = sum of x[kept(row) + red(j)] for j in
// [chunk * L, min(R, (chunk + 1) * L)). When `contig` the reduced elements are contiguous
// (red(j) = j) and V > 1 loads V at a time (the host checked the alignment). Block b handles
// rows (b / S) * (256 / TPR) + threadIdx.x / TPR, chunk b % S.
template <class TI, class TO, int TPR, int V>
__global__ void reduce_rows_kernel(const TI* x, OffsetCalc<1> kept, OffsetCalc<1> red, bool contig,
                                   int64_t K, int64_t R, int64_t L, int64_t S, TO* out) {
  using A = acc_t<TI>;
  const int64_t group = blockIdx.x / S, chunk = blockIdx.x % S;
  const int64_t row = group * (kThreads / TPR) + threadIdx.x / TPR;
  const int lane = threadIdx.x % TPR;
  if (TPR <= 32 && row >= K) return;  // whole warps only; a block-wide row always exists
  const int64_t j0 = chunk * L, j1 = min(R, j0 + L);
  int64_t base[1];
  kept.get(row, base);
  A acc = 0;
  if (contig) {
    const TI* p = x + base[0];
    int64_t j = j0;
    if constexpr (V > 1) {
      const int64_t nv = (j1 - j0) / V;
      const Vec<TI, V>* pv = reinterpret_cast<const Vec<TI, V>*>(p + j0);
      for (int64_t v = lane; v < nv; v += TPR) {
        Vec<TI, V> w = pv[v];
#pragma unroll
        for (int e = 0; e < V; ++e) acc += cvt<A>(w.v[e]);
      }
      j = j0 + nv * V;
    }
    for (j += lane; j < j1; j += TPR) acc += cvt<A>(p[j]);
  } else {
    for (int64_t j = j0 + lane; j < j1; j += TPR) {
      int64_t o[1];
      red.get(j, o);
      acc += cvt<A>(x[base[0] + o[0]]);
    }
  }
  acc = row_sum<TPR>(acc);
  if (lane == 0 && row < K) out[row * S + chunk] = cvt<TO>(acc);
}

// Column reduction: thread k computes out[chunk * K + k] = sum of x[kept(k) + red(j)] for j in
// [chunk * L, min(R, (chunk + 1) * L)), chunk = blockIdx.y, in order. Four loads are issued
// before they are added, so each thread keeps several reads in flight.
template <class TI, class TO>
__global__ void reduce_cols_kernel(const TI* x, OffsetCalc<1> kept, OffsetCalc<1> red, int64_t K, int64_t R,
                                   int64_t L, TO* out) {
  using A = acc_t<TI>;
  const int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (k >= K) return;
  const int64_t chunk = blockIdx.y, j0 = chunk * L, j1 = min(R, j0 + L);
  int64_t base[1];
  kept.get(k, base);
  const TI* p = x + base[0];
  A acc = 0;
  if (red.ndim <= 1) {
    const int64_t s = red.ndim == 1 ? red.strides[0][0] : 0;
    int64_t j = j0;
    for (; j + 4 <= j1; j += 4) {
      TI v0 = p[j * s], v1 = p[(j + 1) * s], v2 = p[(j + 2) * s], v3 = p[(j + 3) * s];
      acc += cvt<A>(v0);
      acc += cvt<A>(v1);
      acc += cvt<A>(v2);
      acc += cvt<A>(v3);
    }
    for (; j < j1; ++j) acc += cvt<A>(p[j * s]);
  } else {
    for (int64_t j = j0; j < j1; ++j) {
      int64_t o[1];
      red.get(j, o);
      acc += cvt<A>(p[o[0]]);
    }
  }
  out[chunk * K + k] = cvt<TO>(acc);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

OffsetCalc<1> calc_1d(int64_t size, int64_t stride) {
  Shape sh{size}, st{stride};
  return make_offset_calc<1>("sum", sh, {&st});
}

// x's dims split into kept dims (row-major, giving the output order) and reduced dims
// (sorted by decreasing stride, so the innermost reduced dim is the one with unit stride if
// any), each coalesced.
struct Split {
  OffsetCalc<1> kept, red;
  int64_t K = 1, R = 1;
};

Split split_dims(const char* op, const Tensor& x, const std::vector<int64_t>& dims) {
  Shape ks, kst;
  std::vector<std::pair<int64_t, int64_t>> red;  // (stride, size)
  Split s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (reduced) red.push_back({x.strides()[d], x.shape()[d]}), s.R *= x.shape()[d];
    else ks.push_back(x.shape()[d]), kst.push_back(x.strides()[d]), s.K *= x.shape()[d];
  }
  std::stable_sort(red.begin(), red.end(), [](auto a, auto b) { return a.first > b.first; });
  Shape rs, rst;
  for (auto [stride, size] : red) rs.push_back(size), rst.push_back(stride);
  s.kept = make_offset_calc<1>(op, ks, {&kst});
  s.red = make_offset_calc<1>(op, rs, {&rst});
  return s;
}

// Rows kernel launch: TPR threads per row, S chunks per row (S == 1 writes T, else A partials).
template <class TI, class TO, int TPR>
void launch_rows(const TI* x, const Split& sp, bool contig, bool vec, int64_t L, int64_t S, TO* out, cudaStream_t st) {
  constexpr int V = 16 / sizeof(TI);
  const int64_t blocks = ceil_div(sp.K, kThreads / TPR) * S;
  TG_CHECK(blocks < (int64_t(1) << 31), "sum", "too many rows for one launch (", sp.K, ")");
  if (vec)
    reduce_rows_kernel<TI, TO, TPR, V><<<unsigned(blocks), kThreads, 0, st>>>(x, sp.kept, sp.red, contig, sp.K, sp.R, L, S, out);
  else
    reduce_rows_kernel<TI, TO, TPR, 1><<<unsigned(blocks), kThreads, 0, st>>>(x, sp.kept, sp.red, contig, sp.K, sp.R, L, S, out);
  TG_CUDA_CHECK_LAUNCH("sum");
}

template <class TI, class TO>
void launch_cols(const TI* x, const Split& sp, int64_t L, int64_t S, TO* out, cudaStream_t st) {
  dim3 grid(unsigned(ceil_div(sp.K, kThreads)), unsigned(S));
  TG_CHECK(ceil_div(sp.K, kThreads) < (int64_t(1) << 31), "sum", "too many outputs for one launch (", sp.K, ")");
  reduce_cols_kernel<TI, TO><<<grid, kThreads, 0, st>>>(x, sp.kept, sp.red, sp.K, sp.R, L, out);
  TG_CUDA_CHECK_LAUNCH("sum");
}

template <class T>
void sum_typed(const Tensor& out, const Tensor& x, const Split& sp) {
  using A = acc_t<T>;
  const DType acc_dtype = std::is_same_v<A, double> ? kFloat64 : kFloat32;
  cudaStream_t st = stream_for(x);
  const int64_t target_blocks = int64_t(sm_count(x.device().index)) * 16;  // two full waves of 256-thread blocks
  const T* px = x.data_ptr<T>();
  T* po = out.data_ptr<T>();

  const bool rows = sp.red.ndim >= 1 && sp.red.strides[0][0] == 1 && sp.R >= 32;
  KernelTrace::record(rows ? "sum.rows" : "sum.columns");
  if (rows) {
    // Contiguous reduced elements; vector loads if every row start is 16-byte aligned.
    constexpr int V = 16 / sizeof(T);
    const bool contig = sp.red.ndim == 1;
    bool vec = contig && aligned_to(px, 16);
    for (int d = 0; d < sp.kept.ndim; ++d) vec = vec && sp.kept.strides[d][0] % V == 0;
    const int tpr = sp.R >= 1024 ? 256 : 32;
    const int64_t groups = ceil_div(sp.K, kThreads / tpr);
    int64_t S = 1, L = sp.R;
    const int64_t min_per_block = int64_t(tpr) * V * 8;
    if (groups < target_blocks && sp.R > min_per_block) {
      S = std::min({ceil_div(target_blocks, groups), ceil_div(sp.R, min_per_block), int64_t(4096)});
      L = ceil_div(ceil_div(sp.R, S), V) * V;  // chunks start on vector boundaries
      S = ceil_div(sp.R, L);
    }
    auto run = [&](auto* dst) {
      using TO = std::remove_pointer_t<decltype(dst)>;
      if (tpr == 256) launch_rows<T, TO, 256>(px, sp, contig, vec, L, S, dst, st);
      else launch_rows<T, TO, 32>(px, sp, contig, vec, L, S, dst, st);
    };
    if (S == 1) return run(po);
    Tensor partial = Tensor::empty({sp.K, S}, {acc_dtype, x.device()});
    A* pp = static_cast<A*>(partial.data_ptr());
    run(pp);
    // Second pass: each row of S partials, contiguous, summed in order of its chunks.
    Split sp2;
    sp2.K = sp.K, sp2.R = S;
    sp2.kept = calc_1d(sp.K, S);
    sp2.red = calc_1d(S, 1);
    launch_rows<A, T, 32>(pp, sp2, true, false, S, 1, po, st);
    return;
  }
  // Columns: one thread per output. Split long reductions: at most 4096 elements in one
  // serial sum (accuracy), and enough blocks to fill the chip (at least 32 elements each).
  const int64_t blocks_x = ceil_div(sp.K, kThreads);
  int64_t S = std::max(ceil_div(sp.R, 4096), std::min(ceil_div(target_blocks, blocks_x), ceil_div(sp.R, 32)));
  S = std::clamp<int64_t>(S, 1, 65535);
  const int64_t L = ceil_div(sp.R, S);
  S = ceil_div(sp.R, L);
  if (S == 1) return launch_cols<T, T>(px, sp, L, 1, po, st);
  Tensor partial = Tensor::empty({S, sp.K}, {acc_dtype, x.device()});
  A* pp = static_cast<A*>(partial.data_ptr());
  launch_cols<T, A>(px, sp, L, S, pp, st);
  Split sp2;
  sp2.K = sp.K, sp2.R = S;
  sp2.kept = calc_1d(sp.K, 1);
  sp2.red = calc_1d(S, sp.K);
  launch_cols<A, T>(pp, sp2, S, 1, po, st);
}

// ---- max ----

// Whether (v, i) beats (bv, bi): NaN beats everything, then the larger value, then the smaller
// index, so the result is the CPU's sequential scan (first occurrence of the max, first NaN).
template <class A>
__device__ __forceinline__ bool beats(A v, int64_t i, A bv, int64_t bi) {
  const bool vn = v != v, bn = bv != bv;
  if (vn || bn) return vn && (!bn || i < bi);
  return v > bv || (v == bv && i < bi);
}

// Max along a contiguous dim: TPR threads per row scan x[kept(row) + j], j < n, then combine
// (value, index) pairs in a fixed tree.
template <class T, int TPR>
__global__ void max_rows_kernel(const T* x, OffsetCalc<1> kept, int64_t K, int64_t n, T* values, int64_t* indices) {
  using A = acc_t<T>;
  const int64_t row = blockIdx.x * int64_t(kThreads / TPR) + threadIdx.x / TPR;
  const int lane = threadIdx.x % TPR;
  if (TPR <= 32 && row >= K) return;
  int64_t base[1];
  kept.get(row, base);
  const T* p = x + base[0];
  A best = cvt<A>(p[lane < n ? lane : 0]);
  int64_t arg = lane < n ? lane : n;  // lanes past n hold a loser
  for (int64_t j = lane + TPR; j < n; j += TPR) {
    A v = cvt<A>(p[j]);
    if (beats(v, j, best, arg)) best = v, arg = j;
  }
  auto combine = [&](int o) {
    A ov = __shfl_xor_sync(0xffffffffu, best, o);
    int64_t oi = __shfl_xor_sync(0xffffffffu, arg, o);
    if (beats(ov, oi, best, arg)) best = ov, arg = oi;
  };
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) combine(o);
  if constexpr (TPR > 32) {
    __shared__ A sv[TPR / 32];
    __shared__ int64_t si[TPR / 32];
    const int warp = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) sv[warp] = best, si[warp] = arg;
    __syncthreads();
    best = l < TPR / 32 ? sv[l] : sv[0];
    arg = l < TPR / 32 ? si[l] : si[0];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) combine(o);
  }
  if (lane == 0 && row < K) values[row] = cvt<T>(best), indices[row] = arg;
}

// Max along a strided dim: one thread per output scans its n elements in order.
template <class T>
__global__ void max_cols_kernel(const T* x, OffsetCalc<1> kept, int64_t K, int64_t n, int64_t stride, T* values,
                                int64_t* indices) {
  using A = acc_t<T>;
  const int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (k >= K) return;
  int64_t base[1];
  kept.get(k, base);
  const T* p = x + base[0];
  A best = cvt<A>(p[0]);
  int64_t arg = 0;
  for (int64_t j = 1; j < n; ++j) {
    A v = cvt<A>(p[j * stride]);
    if (beats(v, j, best, arg)) best = v, arg = j;
  }
  values[k] = cvt<T>(best);
  indices[k] = arg;
}

// dx[o, j, i] = indices[o, i] == j ? g[o, i] : 0 over dx = [outer, n, inner] (contiguous):
// every dx element written once, g and indices read n times (from cache).
template <class T, class I>
__global__ void max_backward_kernel(T* dx, const T* g, const int64_t* indices, I total, I n, I inner) {
  for (I e = blockIdx.x * I(blockDim.x) + threadIdx.x; e < total; e += I(gridDim.x) * blockDim.x) {
    const I i = e % inner, oj = e / inner, j = oj % n, o = oj / n;
    const I gi = o * inner + i;
    dx[e] = indices[gi] == static_cast<int64_t>(j) ? g[gi] : cvt<T>(0.0f);
  }
}

}  // namespace

void sum(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims) {
  if (out.numel() == 0) return;
  TG_CHECK(out.is_contiguous(), "sum", "kernel wants a contiguous output, got strides ", out.strides());
  if (x.numel() == 0) return fill(out, 0.0);
  Split sp = split_dims("sum", x, dims);
  if (sp.R == 1) return copy_strided(out, x);  // only size-1 dims reduced: a copy
  dispatch_floating(x.dtype(), "sum", [&](auto tag) { sum_typed<typename decltype(tag)::type>(out, x, sp); });
}

void max(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  if (values.numel() == 0) return;
  TG_CHECK(values.is_contiguous() && indices.is_contiguous(), "max", "kernel wants contiguous outputs");
  const int64_t n = x.shape()[dim], stride = x.strides()[dim];
  TG_CHECK(n > 0, "max", "max over an empty dim (shape ", x.shape(), ")");
  Split sp = split_dims("max", x, {dim});
  cudaStream_t st = stream_for(x);
  dispatch_floating(x.dtype(), "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data_ptr<T>();
    T* pv = values.data_ptr<T>();
    int64_t* pi = indices.data_ptr<int64_t>();
    KernelTrace::record(stride == 1 && n >= 32 ? "max.rows" : "max.columns");
    if (stride == 1 && n >= 32) {
      if (n >= 1024) {
        max_rows_kernel<T, 256><<<unsigned(sp.K), kThreads, 0, st>>>(px, sp.kept, sp.K, n, pv, pi);
      } else {
        max_rows_kernel<T, 32><<<unsigned(ceil_div(sp.K, kThreads / 32)), kThreads, 0, st>>>(px, sp.kept, sp.K, n, pv, pi);
      }
    } else {
      max_cols_kernel<T><<<unsigned(ceil_div(sp.K, kThreads)), kThreads, 0, st>>>(px, sp.kept, sp.K, n, stride, pv, pi);
    }
    TG_CUDA_CHECK_LAUNCH("max");
  });
}

void max_backward(const Tensor& dx, const Tensor& g, const Tensor& indices, int64_t dim) {
  const int64_t total = dx.numel();
  if (total == 0) return;
  TG_CHECK(dx.is_contiguous(), "max", "backward kernel wants a contiguous dx, got strides ", dx.strides());
  const Tensor gc = g.is_contiguous() ? g : clone_data(g);
  const Tensor ic = indices.is_contiguous() ? indices : clone_data(indices);
  int64_t inner = 1;
  for (int64_t k = dim + 1; k < dx.dim(); ++k) inner *= dx.shape()[k];
  const int64_t n = dx.shape()[dim];
  cudaStream_t st = stream_for(dx);
  dispatch_floating(dx.dtype(), "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (total < (int64_t(1) << 31))
      max_backward_kernel<T, uint32_t><<<blocks_for(total, kThreads), kThreads, 0, st>>>(
          dx.data_ptr<T>(), gc.data_ptr<T>(), ic.data_ptr<int64_t>(), uint32_t(total), uint32_t(n), uint32_t(inner));
    else
      max_backward_kernel<T, int64_t><<<blocks_for(total, kThreads), kThreads, 0, st>>>(
          dx.data_ptr<T>(), gc.data_ptr<T>(), ic.data_ptr<int64_t>(), total, n, inner);
    TG_CUDA_CHECK_LAUNCH("max_backward");
  });
}

}  // namespace tg::cuda
