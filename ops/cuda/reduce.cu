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
#include <cmath>

#include "core/cuda/elementwise.cuh"
#include "core/cuda/runtime.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "core/detail/type_dispatch.h"
#include "ops/reduce_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

// Sums `v` over the TPR threads of a row (TPR = 32, 64, 128 or 256 consecutive threads of the
// 256-thread block); the result is valid in the row's first thread. Fixed butterfly order and
// fixed shared-memory order: deterministic. Every thread of the block must call it when TPR > 32.
template <int TPR, class A>
__device__ __forceinline__ A row_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (TPR > 32) {
    constexpr int W = TPR / 32;  // warps per row
    __shared__ A partial[kThreads / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < W ? partial[(warp / W) * W + lane] : A(0);
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
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
  if (TPR <= 32 && row >= K) return;  // whole warps only; wider rows all reach row_sum
  const int64_t j0 = chunk * L, j1 = row < K ? min(R, j0 + L) : j0;  // a row past K reads nothing
  int64_t base[1];
  kept.get(row, base);
  A acc = 0;
  if (contig) {
    const TI* p = x + base[0];
    int64_t j = j0;
    if constexpr (V > 1) {
      const int64_t nv = (j1 - j0) / V;
      const Pack<TI, V>* pv = reinterpret_cast<const Pack<TI, V>*>(p + j0);
#pragma unroll 4
      for (int64_t v = lane; v < nv; v += TPR) {
        Pack<TI, V> w = pv[v];
#pragma unroll
        for (int e = 0; e < V; ++e) acc += cvt<A>(w.get(e));
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

// Column reduction: thread t computes, for the V outputs k = t*V .. t*V+V-1,
// out[chunk * K + k] = sum of x[kept(k) + red(j)] for j in [chunk * L, min(R, (chunk + 1) * L)),
// chunk = blockIdx.y, in order. With V > 1 the V outputs are adjacent in x (the host checked
// unit kept stride, sizes and strides multiple of V, alignment) and read with one 16-byte load.
// Four loads are issued before they are added, so each thread keeps several reads in flight.
template <class TI, class TO, int V>
__global__ void reduce_cols_kernel(const TI* x, OffsetCalc<1> kept, OffsetCalc<1> red, int64_t K, int64_t R,
                                   int64_t L, TO* out) {
  using A = acc_t<TI>;
  using VI = Pack<TI, V>;
  const int64_t k = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * V;
  if (k >= K) return;
  const int64_t chunk = blockIdx.y, j0 = chunk * L, j1 = min(R, j0 + L);
  int64_t base[1];
  kept.get(k, base);
  const TI* p = x + base[0];
  A acc[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = 0;
  auto add = [&](const VI& w) {
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] += cvt<A>(w.get(e));
  };
  if (red.ndim <= 1) {
    const int64_t s = red.ndim == 1 ? red.strides[0][0] : 0;
    int64_t j = j0;
    for (; j + 4 <= j1; j += 4) {
      VI w0 = *reinterpret_cast<const VI*>(p + j * s), w1 = *reinterpret_cast<const VI*>(p + (j + 1) * s);
      VI w2 = *reinterpret_cast<const VI*>(p + (j + 2) * s), w3 = *reinterpret_cast<const VI*>(p + (j + 3) * s);
      add(w0);
      add(w1);
      add(w2);
      add(w3);
    }
    for (; j < j1; ++j) add(*reinterpret_cast<const VI*>(p + j * s));
  } else {
    for (int64_t j = j0; j < j1; ++j) {
      int64_t o[1];
      red.get(j, o);
      add(*reinterpret_cast<const VI*>(p + o[0]));
    }
  }
  Pack<TO, V> r;
#pragma unroll
  for (int e = 0; e < V; ++e) r.set(e, cvt<TO>(acc[e]));
  *reinterpret_cast<Pack<TO, V>*>(out + chunk * K + k) = r;
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

// Columns kernel launch: V adjacent outputs per thread (V == 1: one), S chunks of L reduced
// elements (S == 1 writes T, else A partials laid out [S, K]).
template <class TI, class TO>
void launch_cols(const TI* x, const Split& sp, bool vec, int64_t L, int64_t S, TO* out, cudaStream_t st) {
  constexpr int V = 16 / sizeof(TI);
  const int64_t threads = vec ? sp.K / V : sp.K;
  TG_CHECK(ceil_div(threads, kThreads) < (int64_t(1) << 31), "sum", "too many outputs for one launch (", sp.K, ")");
  dim3 grid(unsigned(ceil_div(threads, kThreads)), unsigned(S));
  if (vec) reduce_cols_kernel<TI, TO, V><<<grid, kThreads, 0, st>>>(x, sp.kept, sp.red, sp.K, sp.R, L, out);
  else reduce_cols_kernel<TI, TO, 1><<<grid, kThreads, 0, st>>>(x, sp.kept, sp.red, sp.K, sp.R, L, out);
  TG_CUDA_CHECK_LAUNCH("sum");
}

// Whether the columns kernel can read V adjacent outputs with one aligned vector load: unit
// innermost kept stride, every size/stride a multiple of V, aligned pointers.
bool cols_vectorisable(const Split& sp, const void* x, const void* out, int V) {
  if (!aligned(x, 16) || !aligned(out, 16) || sp.kept.ndim == 0) return false;
  if (sp.kept.strides[0][0] != 1 || sp.kept.sizes[0] % V != 0) return false;
  for (int d = 1; d < sp.kept.ndim; ++d)
    if (sp.kept.strides[d][0] % V != 0) return false;
  for (int d = 0; d < sp.red.ndim; ++d)
    if (sp.red.strides[d][0] % V != 0) return false;
  return true;
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
    bool vec = contig && aligned(px, 16);
    for (int d = 0; d < sp.kept.ndim; ++d) vec = vec && sp.kept.strides[d][0] % V == 0;
    // Threads per row: the fewest (32 to 256) that leave each about 16 vectors.
    int tpr = 32;
    while (tpr < 256 && ceil_div(sp.R, V) > int64_t(tpr) * 16) tpr *= 2;
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
      switch (tpr) {
        case 32: return launch_rows<T, TO, 32>(px, sp, contig, vec, L, S, dst, st);
        case 64: return launch_rows<T, TO, 64>(px, sp, contig, vec, L, S, dst, st);
        case 128: return launch_rows<T, TO, 128>(px, sp, contig, vec, L, S, dst, st);
        default: return launch_rows<T, TO, 256>(px, sp, contig, vec, L, S, dst, st);
      }
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
  // Columns: one thread per output (or per V adjacent outputs). Split long reductions: at most
  // 4096 elements in one serial sum (accuracy), and enough blocks to fill the chip, each thread
  // still summing a fair run (32 elements, 128 vectors).
  constexpr int V = 16 / sizeof(T);
  const bool vec = cols_vectorisable(sp, px, po, V);
  const int64_t blocks_x = ceil_div(vec ? sp.K / V : sp.K, kThreads);
  const int64_t min_run = vec ? 128 : 32;
  int64_t S = std::max(ceil_div(sp.R, 4096), std::min(ceil_div(target_blocks, blocks_x), ceil_div(sp.R, min_run)));
  S = std::clamp<int64_t>(S, 1, 65535);
  const int64_t L = ceil_div(sp.R, S);
  S = ceil_div(sp.R, L);
  if (S == 1) return launch_cols<T, T>(px, sp, vec, L, 1, po, st);
  Tensor partial = Tensor::empty({S, sp.K}, {acc_dtype, x.device()});
  A* pp = static_cast<A*>(partial.data_ptr());
  launch_cols<T, A>(px, sp, vec, L, S, pp, st);
  Split sp2;
  sp2.K = sp.K, sp2.R = S;
  sp2.kept = calc_1d(sp.K, 1);
  sp2.red = calc_1d(S, sp.K);
  constexpr int VA = 16 / sizeof(A);
  launch_cols<A, T>(pp, sp2, sp.K % VA == 0 && aligned(po, 16), S, 1, po, st);
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

// Max along a contiguous dim: TPR threads per row scan x[kept(row) + j], j < n (V at a time
// with aligned 16-byte loads when V > 1, each lane's indices increasing), then combine
// (value, index) pairs in a fixed tree. Reads the row once.
template <class T, int TPR, int V>
__global__ void max_rows_kernel(const T* x, OffsetCalc<1> kept, int64_t K, int64_t n, T* values, int64_t* indices) {
  using A = acc_t<T>;
  const int64_t row = blockIdx.x * int64_t(kThreads / TPR) + threadIdx.x / TPR;
  const int lane = threadIdx.x % TPR;
  if (TPR <= 32 && row >= K) return;
  int64_t base[1];
  kept.get(row, base);
  const T* p = x + base[0];
  A best = -INFINITY;
  int64_t arg = n;  // (-inf, n) loses to every element
  int64_t j = 0;
  if constexpr (V > 1) {
    const int64_t nv = n / V;
    const Pack<T, V>* pv = reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll 2
    for (int64_t v = lane; v < nv; v += TPR) {
      Pack<T, V> w = pv[v];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        A val = cvt<A>(w.get(e));
        if (beats(val, v * V + e, best, arg)) best = val, arg = v * V + e;
      }
    }
    j = nv * V;
  }
  for (j += lane; j < n; j += TPR) {
    A val = cvt<A>(p[j]);
    if (beats(val, j, best, arg)) best = val, arg = j;
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
      constexpr int V = 16 / sizeof(T);
      bool vec = aligned(px, 16);
      for (int d = 0; d < sp.kept.ndim; ++d) vec = vec && sp.kept.strides[d][0] % V == 0;
      const bool warp = n < 1024 || (n <= int64_t(32) * 32 * V && sp.K >= int64_t(sm_count(x.device().index)) * 32);
      const unsigned blocks = unsigned(warp ? ceil_div(sp.K, kThreads / 32) : sp.K);
      if (warp && vec) max_rows_kernel<T, 32, V><<<blocks, kThreads, 0, st>>>(px, sp.kept, sp.K, n, pv, pi);
      else if (warp) max_rows_kernel<T, 32, 1><<<blocks, kThreads, 0, st>>>(px, sp.kept, sp.K, n, pv, pi);
      else if (vec) max_rows_kernel<T, 256, V><<<blocks, kThreads, 0, st>>>(px, sp.kept, sp.K, n, pv, pi);
      else max_rows_kernel<T, 256, 1><<<blocks, kThreads, 0, st>>>(px, sp.kept, sp.K, n, pv, pi);
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
