// The elementwise machinery shared by copy_/fill_/accumulate_ and the unary/binary ops:
//   out[i] = f(in_0[i], ..., in_{NI-1}[i])  over out's shape, every operand with its own strides.
// The host first coalesces dims (drops size-1 dims, merges dims that are contiguous for every
// operand). If that leaves one dim of unit stride for all operands and every pointer is aligned,
// a vectorised kernel runs: each thread loads 16 bytes of each input and stores 16 bytes (the
// n % V tail elements are done one by one). If the innermost dim is whole vectors for every
// operand (a broadcast bias, padded rows), a strided kernel moves whole vectors. Otherwise a
// strided kernel computes all operands' offsets with one div/mod per dim, in 32-bit arithmetic
// when the index fits.
// Memory traffic either way: each input element read once, each output element written once.
#pragma once

#include <cstdint>
#include <array>
#include <vector>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"

namespace tg::cuda {

// Offsets of N operands for a flat row-major index; dims stored innermost first.
template <int N>
struct OffsetCalc {
  static constexpr int kMaxDims = 8;
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims][N];

  template <class I>
  __device__ __forceinline__ void get(I i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      I r = i;
      if (d + 1 < ndim) {  // the outermost dim needs no division
        I size = static_cast<I>(sizes[d]);
        I q = i / size;
        r = i - q * size;
        i = q;
      }
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(r) * strides[d][k];
    }
  }
  // True when every operand walks memory contiguously (one unit-stride dim, or one element).
  bool contiguous() const {
    if (ndim == 0) return true;
    if (ndim > 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[0][k] != 1) return false;
    return true;
  }
};

// Builds the offset calculator of `shape` for N stride vectors (row-major dims), coalescing
// dims first. `op` names the caller in the error for more than 8 non-mergeable dims.
template <int N>
OffsetCalc<N> make_offset_calc(const char* op, const Shape& shape, const std::array<const Shape*, N>& strides) {
  // Walk from innermost to outermost, merging dim d into the current run when, for every
  // operand, stride[d] == stride[run] * size[run].
  std::vector<int64_t> sz;
  std::vector<std::array<int64_t, N>> st;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    bool merge = !sz.empty();
    for (int k = 0; k < N && merge; ++k) merge = (*strides[k])[d] == st.back()[k] * sz.back();
    if (merge) {
      sz.back() *= shape[d];
    } else {
      sz.push_back(shape[d]);
      std::array<int64_t, N> s;
      for (int k = 0; k < N; ++k) s[k] = (*strides[k])[d];
      st.push_back(s);
    }
  }
  OffsetCalc<N> oc;
  TG_CHECK(sz.size() <= static_cast<size_t>(OffsetCalc<N>::kMaxDims), op, "tensors of more than ",
           OffsetCalc<N>::kMaxDims, " non-mergeable dims are not supported on the GPU, got shape ", shape);
  oc.ndim = static_cast<int>(sz.size());
  for (size_t d = 0; d < sz.size(); ++d) {
    oc.sizes[d] = sz[d];
    for (int k = 0; k < N; ++k) oc.strides[d][k] = st[d][k];
  }
  return oc;
}

template <class TO, class TI, int NI>
struct EwArgs {
  TO* out;
  const TI* in[NI > 0 ? NI : 1];
};

template <class F, class TI, int NI>
__device__ __forceinline__ auto ew_apply(const F& f, const TI (&x)[NI > 0 ? NI : 1]) {
  if constexpr (NI == 0) return f();
  else if constexpr (NI == 1) return f(x[0]);
  else if constexpr (NI == 2) return f(x[0], x[1]);
  else return f(x[0], x[1], x[2]);
}

// Contiguous operands: V elements per thread per step with vector loads/stores, grid-stride;
// threads 0..(n % V)-1 also do one tail element each.
template <int V, class TO, class TI, int NI, class F>
__global__ void ew_vec_kernel(EwArgs<TO, TI, NI> a, int64_t n, F f) {
  const int64_t nvec = n / V;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t v = tid; v < nvec; v += int64_t(gridDim.x) * blockDim.x) {
    Pack<TI, V> x[NI > 0 ? NI : 1];
#pragma unroll
    for (int k = 0; k < NI; ++k) x[k] = reinterpret_cast<const Pack<TI, V>*>(a.in[k])[v];
    Pack<TO, V> y;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      TI xs[NI > 0 ? NI : 1];
#pragma unroll
      for (int k = 0; k < NI; ++k) xs[k] = x[k].get(j);
      y.set(j, ew_apply<F, TI, NI>(f, xs));
    }
    reinterpret_cast<Pack<TO, V>*>(a.out)[v] = y;
  }
  const int64_t t = nvec * V + tid;
  if (t < n) {
    TI xs[NI > 0 ? NI : 1];
#pragma unroll
    for (int k = 0; k < NI; ++k) xs[k] = a.in[k][t];
    a.out[t] = ew_apply<F, TI, NI>(f, xs);
  }
}

// Rows of whole vectors: every operand's innermost dim has stride 1 (or 0: one value broadcast
// along it) and its size and all other strides are multiples of V, so vector i of the output
// is V consecutive elements and `oc` (built with the innermost size divided by V) gives the
// element offset of each operand's first one: one offset computation per V elements, 16-byte
// loads/stores. The bias add [N, D] + [D] and [N, 1] * [1, D] run here. Bit k of `bcast` marks
// input k as broadcast along the innermost dim.
template <int V, class I, class TO, class TI, int NI, class F>
__global__ void ew_vec_strided_kernel(EwArgs<TO, TI, NI> a, OffsetCalc<NI + 1> oc, I nvec, unsigned bcast, F f) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < nvec; i += I(gridDim.x) * blockDim.x) {
    int64_t off[NI + 1];
    oc.get(i, off);
    Pack<TI, V> x[NI > 0 ? NI : 1];
#pragma unroll
    for (int k = 0; k < NI; ++k) {
      if (bcast >> k & 1u) {
        const TI v = a.in[k][off[k + 1]];
#pragma unroll
        for (int j = 0; j < V; ++j) x[k].set(j, v);
      } else {
        x[k] = *reinterpret_cast<const Pack<TI, V>*>(a.in[k] + off[k + 1]);
      }
    }
    Pack<TO, V> y;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      TI xs[NI > 0 ? NI : 1];
#pragma unroll
      for (int k = 0; k < NI; ++k) xs[k] = x[k].get(j);
      y.set(j, ew_apply<F, TI, NI>(f, xs));
    }
    *reinterpret_cast<Pack<TO, V>*>(a.out + off[0]) = y;
  }
}

// Any strides (broadcast dims have stride 0): offsets from the coalesced shape. I is the index
// type (uint32_t when n < 2^31, else int64_t).
template <class I, class TO, class TI, int NI, class F>
__global__ void ew_strided_kernel(EwArgs<TO, TI, NI> a, OffsetCalc<NI + 1> oc, I n, F f) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    int64_t off[NI + 1];
    oc.get(i, off);
    TI xs[NI > 0 ? NI : 1];
#pragma unroll
    for (int k = 0; k < NI; ++k) xs[k] = a.in[k][off[k + 1]];
    a.out[off[0]] = ew_apply<F, TI, NI>(f, xs);
  }
}

// out = f(ins...) elementwise over out's shape; every input has out's shape (broadcast views
// with stride 0 are fine). TO/TI are the element types of out and of every input. In-place
// (out aliasing an input element for element) is allowed.
template <class TO, class TI, int NI, class F>
void launch_elementwise(const char* op, const Tensor& out, const std::array<Tensor, NI>& ins, const F& f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  cudaStream_t s = stream_for(out);
  EwArgs<TO, TI, NI> args;
  args.out = static_cast<TO*>(out.data_ptr());
  std::array<const Shape*, NI + 1> strides;
  strides[0] = &out.strides();
  for (int k = 0; k < NI; ++k) {
    TG_CHECK(ins[k].shape() == out.shape(), op, "input ", k, " has shape ", ins[k].shape(),
             ", the output ", out.shape());
    TG_CHECK(ins[k].device() == out.device(), op, "input ", k, " is on ", ins[k].device(),
             " but the output is on ", out.device());
    args.in[k] = static_cast<const TI*>(ins[k].data_ptr());
    strides[k + 1] = &ins[k].strides();
  }
  OffsetCalc<NI + 1> oc = make_offset_calc<NI + 1>(op, out.shape(), strides);

  constexpr int V = 16 / (sizeof(TO) > sizeof(TI) ? sizeof(TO) : sizeof(TI));
  bool all_aligned = aligned(args.out, V * sizeof(TO));
  for (int k = 0; k < NI; ++k) all_aligned = all_aligned && aligned(args.in[k], V * sizeof(TI));
  if (oc.contiguous() && all_aligned) {
    int64_t work = std::max<int64_t>(n / V, n % V);
    ew_vec_kernel<V, TO, TI, NI, F><<<blocks_for(work, kThreads), kThreads, 0, s>>>(args, n, f);
    TG_CUDA_CHECK_LAUNCH(op);
    return;
  }
  // Whole-vector rows (see ew_vec_strided_kernel)?
  bool rows_of_vectors = all_aligned && oc.ndim >= 1 && oc.sizes[0] % V == 0 && oc.strides[0][0] == 1;
  unsigned bcast = 0;
  for (int k = 0; k <= NI && rows_of_vectors; ++k) {
    const int64_t inner = oc.strides[0][k];
    rows_of_vectors = inner == 1 || (k > 0 && inner == 0);
    if (k > 0 && inner == 0) bcast |= 1u << (k - 1);
    for (int d = 1; d < oc.ndim; ++d) rows_of_vectors = rows_of_vectors && oc.strides[d][k] % V == 0;
  }
  if (rows_of_vectors) {
    OffsetCalc<NI + 1> ov = oc;
    ov.sizes[0] /= V;
    for (int k = 0; k <= NI; ++k) ov.strides[0][k] *= V;
    const int64_t nvec = n / V;
    if (nvec < (int64_t(1) << 31))
      ew_vec_strided_kernel<V, uint32_t, TO, TI, NI, F><<<blocks_for(nvec, kThreads), kThreads, 0, s>>>(
          args, ov, static_cast<uint32_t>(nvec), bcast, f);
    else
      ew_vec_strided_kernel<V, int64_t, TO, TI, NI, F><<<blocks_for(nvec, kThreads), kThreads, 0, s>>>(
          args, ov, nvec, bcast, f);
    TG_CUDA_CHECK_LAUNCH(op);
    return;
  }
  if (n < (int64_t(1) << 31)) {
    ew_strided_kernel<uint32_t, TO, TI, NI, F><<<blocks_for(n, kThreads), kThreads, 0, s>>>(
        args, oc, static_cast<uint32_t>(n), f);
    TG_CUDA_CHECK_LAUNCH(op);
  } else {
    ew_strided_kernel<int64_t, TO, TI, NI, F><<<blocks_for(n, kThreads), kThreads, 0, s>>>(args, oc, n, f);
    TG_CUDA_CHECK_LAUNCH(op);
  }
}

}  // namespace tg::cuda
