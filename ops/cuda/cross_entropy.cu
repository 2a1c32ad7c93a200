// CUDA cross_entropy, float32 accumulation, one block per row of logits.
//   forward:  reads the row once (online max + sum, in 16-byte packs) and the target's
//             logit, writes two floats per row (loss, logsumexp): N * V reads, 2N writes.
//   with the gradient (cross_entropy_with_grad, linear_cross_entropy's chunks), one launch that
//             also rewrites each row in place as dlogits = softmax - onehot:
//             - row-once (sm_90, rows of >= 16384 classes in 16-byte packs): a thread-block
//               cluster of C CTAs a row (C = 1, 2, 4 or 8: slices of at most 64 KB), each
//               copying its slice into shared memory, the partial (max, sum) merged through
//               distributed shared memory, dlogits written from shared memory: N * V reads and
//               N * V writes (dev/cuda/06_cross_entropy_row_once.cu);
//             - otherwise the forward's block re-reads its row (from L2 while the rows in flight
//               fit it) and writes dlogits: 2 N * V reads, N * V writes.
//   reduce:   one block sums the N row losses and counts the targets not ignored.
//   backward: reads the row once more and writes dlogits = g * (exp(x - lse) - onehot):
//             N * V reads, N * V writes. The N x V softmax is never stored.
// Targets outside [0, V) (other than ignore_index) read nothing: their loss is nan, their
// gradient row zero, and they are reported through the index-error flag (index_check.cuh).
#include <cooperative_groups.h>

#include <limits>
#include <utility>

#include "core/cuda/cuda_utils.cuh"
#include "core/trace.h"
#include "ops/cross_entropy_kernels.h"
#include "ops/cuda/index_check.cuh"
#include "ops/cuda/softmax_rows.cuh"

namespace tg::cuda {
namespace {

constexpr int kReduceThreads = 1024;

int row_threads(int64_t v) { return v >= 16384 ? 1024 : v >= 2048 ? 512 : 128; }

// Writes a row's lse and loss: 0 for an ignored target, nan (and the index-error flag) for one out
// of range, else lse - the target's logit.
__device__ __forceinline__ void write_row_loss(float* loss, float* lse, int64_t row, float l, float xt, int64_t t,
                                               int64_t classes, int64_t ignore_index, long long* flag) {
  lse[row] = l;
  if (t == ignore_index) {
    loss[row] = 0.f;
  } else if (t < 0 || t >= classes) {
    loss[row] = std::numeric_limits<float>::quiet_NaN();
    index_check::report(flag, index_check::kCrossEntropy, t, classes);
  } else {
    loss[row] = l - xt;
  }
}

// kGrad: the row then becomes its dlogits for a unit gradient (x is contiguous and written in
// place: the target's logit is read before the block's merge, so before any thread writes).
template <class T, class I, bool kGrad>
__global__ void cross_entropy_forward(float* loss, float* lse, T* logits, int64_t ld, const I* targets,
                                      int64_t classes, int64_t ignore_index, long long* flag) {
  const int64_t row = blockIdx.x;
  T* x = logits + row * ld;
  const int64_t t = static_cast<int64_t>(targets[row]);
  const bool valid = t != ignore_index && t >= 0 && t < classes;
  const float xt = threadIdx.x == 0 && valid ? cvt<float>(x[t]) : 0.f;
  const OnlineSoftmax<float> st =
      softmax_rows::block_merge(softmax_rows::row_stats(x, classes, threadIdx.x, blockDim.x));
  const float l = st.logsumexp();
  if (threadIdx.x == 0) write_row_loss(loss, lse, row, l, xt, t, classes, ignore_index, flag);
  if constexpr (kGrad) {
    if (!valid) {
      for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) x[j] = cvt<T>(0.f);
      return;
    }
    const float ll = l * softmax_rows::kLog2e;
    softmax_rows::map_row(x, x, x, classes, threadIdx.x, blockDim.x,
                [=](int64_t j, float v, float) { return softmax_rows::exp_sub(v, ll) - (j == t ? 1.f : 0.f); });
  }
}

// Row-once: a cluster of C CTAs a row; CTA `rank` owns the packs [rank * slice, + slice) of it.
// Thread i copies packs i, i + kThreads, ... (at most kRounds) into shared memory, all in flight
// at once (cp.async, a commit group a round), and folds each round into its online softmax as it
// lands. The CTAs' (max, sum) merge in rank order through distributed shared memory, so every CTA
// holds the same lse; each then writes its slice as dlogits from shared memory.
constexpr int kRowOnceThreads = 512, kRounds = 8;
constexpr int64_t kRowOnceSliceBytes = 64 * 1024;  // three CTAs a multiprocessor: one's copies overlap another's math
constexpr int64_t kRowOnceMinClasses = 16384;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))),
               "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// f(std::integral_constant<int, r>{}) for r = 0 .. R-1: unrolled, r a constant expression.
template <int R, class F>
__device__ __forceinline__ void unrolled(F&& f) {
  [&]<int... r>(std::integer_sequence<int, r...>) { (f(std::integral_constant<int, r>{}), ...); }(
      std::make_integer_sequence<int, R>{});
}

template <class T, class I>
__global__ void __launch_bounds__(kRowOnceThreads, 3)
    cross_entropy_grad_row_once(float* loss, float* lse, T* logits, int64_t ld, const I* targets, int64_t classes,
                                int64_t ignore_index, long long* flag, int slice) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // no clusters before sm_90: compiled_for_sm90() keeps the launch away
#else
  constexpr int P = kPack16<T>;
  using Pk = Pack<T, P>;
  extern __shared__ __align__(16) unsigned char row_once_smem[];
  Pk* sm = reinterpret_cast<Pk*>(row_once_smem);
  __shared__ float part[2];
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), C = cluster.num_blocks();
  const int64_t row = blockIdx.x / C;
  T* x = logits + row * ld;
  const int64_t k0 = int64_t(rank) * slice;                   // the slice's first pack in the row
  const int n = static_cast<int>(min(int64_t(slice), classes / P - k0));  // the last slice may be short
  Pk* xs = reinterpret_cast<Pk*>(x) + k0;
  unrolled<kRounds>([&](auto r) {
    const int i = threadIdx.x + r * kRowOnceThreads;
    if (i < n) cp_async16(&sm[i], &xs[i]);
    cp_async_commit();
  });
  const int64_t t = static_cast<int64_t>(targets[row]);
  const bool valid = t != ignore_index && t >= 0 && t < classes;
  const float xt = rank == 0 && threadIdx.x == 0 && valid ? cvt<float>(x[t]) : 0.f;  // before the cluster's writes
  OnlineSoftmax<float> st;
  unrolled<kRounds>([&](auto r) {
    cp_async_wait<kRounds - 1 - r>();
    const int i = threadIdx.x + r * kRowOnceThreads;
    if (i < n) {
      const Pk pk = sm[i];
      float v[P];
#pragma unroll
      for (int q = 0; q < P; ++q) v[q] = elem(pk, q);
      softmax_rows::online_add(st, v);
    }
  });
  st = softmax_rows::block_merge(st);
  if (threadIdx.x == 0) part[0] = st.m, part[1] = st.s;
  cluster.sync();
  OnlineSoftmax<float> all;
  for (unsigned c = 0; c < C; ++c) {
    const float* p = cluster.map_shared_rank(part, c);
    all.merge(p[0], p[1]);
  }
  cluster.barrier_arrive();  // done with the other CTAs' `part`; waited for before exit
  const float l = all.logsumexp();
  if (rank == 0 && threadIdx.x == 0) write_row_loss(loss, lse, row, l, xt, t, classes, ignore_index, flag);
  const float ll = l * softmax_rows::kLog2e;
  const int64_t ts = valid ? t - k0 * P : -1;  // the target in the slice (-1: nowhere)
  unrolled<kRounds>([&](auto r) {
    const int i = threadIdx.x + r * kRowOnceThreads;
    if (i < n) {
      const Pk pk = sm[i];
      float o[P];
#pragma unroll
      for (int q = 0; q < P; ++q)
        o[q] = valid ? softmax_rows::exp_sub(elem(pk, q), ll) - (int64_t(i) * P + q == ts ? 1.f : 0.f) : 0.f;
      xs[i] = pack_of<T, P>(o);
    }
  });
  cluster.barrier_wait();
#endif
}

// Launches the row-once kernel when it covers the logits (else false: the two-read kernel).
template <class T, class I>
bool launch_row_once(const Tensor& loss_rows, const Tensor& lse, T* x, int64_t rows, int64_t classes, int64_t ld,
                     const Tensor& targets, int64_t ignore_index, cudaStream_t s, int device) {
  constexpr int P = kPack16<T>;
  if (classes < kRowOnceMinClasses || classes % P != 0 || ld % P != 0 || !aligned(x, 16)) return false;
  const int64_t packs = classes / P;
  int64_t C = 1;
  while (C < 8 && (packs + C - 1) / C * 16 > kRowOnceSliceBytes) C *= 2;
  const int64_t slice = (packs + C - 1) / C;
  if (slice * 16 > kRowOnceSliceBytes) return false;  // a row over 8 slices: float32 rows of more than 131072
  auto fn = cross_entropy_grad_row_once<T, I>;
  if (!compiled_for_sm90(reinterpret_cast<const void*>(fn), device)) return false;
  const size_t smem = static_cast<size_t>(slice) * 16;
  allow_smem(reinterpret_cast<const void*>(fn), smem, device);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(rows * C));
  config.blockDim = dim3(kRowOnceThreads);
  config.dynamicSmemBytes = smem;
  config.stream = s;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = static_cast<unsigned>(C);
  cluster[0].val.clusterDim.y = cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = 1;
  TG_CUDA_CHECK(cudaLaunchKernelEx(&config, fn, loss_rows.data_ptr<float>(), lse.data_ptr<float>(), x, ld,
                                   targets.data_ptr<I>(), classes, ignore_index, index_check::flag(device),
                                   static_cast<int>(slice)));
  TG_CUDA_CHECK_LAUNCH("cross_entropy_grad_row_once");
  return true;
}

// out = sum(loss) (/ count when mean); count = number of targets != ignore_index.
template <class T, class I>
__global__ void cross_entropy_reduce_kernel(T* out, float* count, const float* loss, const I* targets, int64_t rows,
                                            int64_t ignore_index, bool mean) {
  float sum = 0.f, n = 0.f;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    sum += loss[i];
    n += static_cast<int64_t>(targets[i]) != ignore_index ? 1.f : 0.f;
  }
  sum = softmax_rows::block_sum(sum);
  n = softmax_rows::block_sum(n);
  if (threadIdx.x == 0) {
    out[0] = cvt<T>(mean ? sum / n : sum);  // all ignored: 0 / 0 = nan, as in PyTorch
    if (count) count[0] = n;
  }
}

template <class T, class I>
__global__ void cross_entropy_backward_kernel(T* dlogits, const T* grad, int64_t grad_step, const float* count,
                                              const float* lse, const T* logits, int64_t ld, const I* targets,
                                              int64_t classes, int64_t ignore_index) {
  const int64_t row = blockIdx.x;
  const int64_t t = static_cast<int64_t>(targets[row]);
  T* d = dlogits + row * classes;
  if (t == ignore_index || t < 0 || t >= classes) {
    const T zero = cvt<T>(0.f);
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) d[j] = zero;
    return;
  }
  const float scale = cvt<float>(grad[row * grad_step]) / (count ? count[0] : 1.f),
              ll = lse[row] * softmax_rows::kLog2e;
  const T* x = logits + row * ld;
  softmax_rows::map_row(d, x, x, classes, threadIdx.x, blockDim.x,
              [=](int64_t j, float v, float) { return scale * (softmax_rows::exp_sub(v, ll) - (j == t ? 1.f : 0.f)); });
}

}  // namespace

template <bool kGrad>
void launch_forward(const Tensor& loss_rows, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                    int64_t ignore_index) {
  const int device = logits.device().index;
  index_check::raise_pending(device);
  dispatch_gpu_float_index(logits.dtype(), targets.dtype(), "cross_entropy", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    cudaStream_t s = stream_for(logits);
    T* px = logits.data_ptr<T>();  // written only with kGrad (the contract's in-place case)
    const int64_t rows = logits.shape()[0], classes = logits.shape()[1], ld = logits.strides()[0];
    if (kGrad && rows > 0 && launch_row_once<T, I>(loss_rows, lse, px, rows, classes, ld, targets, ignore_index, s, device)) {
      KernelTrace::record("cross_entropy.grad_row_once");
      index_check::watch(device, s);
      return;
    }
    if (kGrad) KernelTrace::record("cross_entropy.grad_two_reads");
    cross_entropy_forward<T, I, kGrad><<<static_cast<unsigned>(rows), row_threads(classes), 0, s>>>(
        loss_rows.data_ptr<float>(), lse.data_ptr<float>(), px, ld, targets.data_ptr<I>(), classes, ignore_index,
        index_check::flag(device));
    TG_CUDA_CHECK_LAUNCH("cross_entropy_forward");
    index_check::watch(device, s);
  });
}

void cross_entropy(const Tensor& loss_rows, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                   int64_t ignore_index) {
  launch_forward<false>(loss_rows, lse, logits, targets, ignore_index);
}

void cross_entropy_with_grad(const Tensor& loss_rows, const Tensor& lse, const Tensor& logits, const Tensor& targets,
                             int64_t ignore_index) {
  launch_forward<true>(loss_rows, lse, logits, targets, ignore_index);
}

void cross_entropy_reduce(const Tensor& out, const Tensor& count, const Tensor& loss_rows, const Tensor& targets,
                          int64_t ignore_index, bool mean) {
  dispatch_gpu_float_index(out.dtype(), targets.dtype(), "cross_entropy", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    cross_entropy_reduce_kernel<T, I><<<1, kReduceThreads, 0, stream_for(out)>>>(
        out.data_ptr<T>(), count.defined() ? count.data_ptr<float>() : nullptr, loss_rows.data_ptr<float>(),
        targets.data_ptr<I>(), loss_rows.numel(), ignore_index, mean);
    TG_CUDA_CHECK_LAUNCH("cross_entropy_reduce");
  });
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& grad, const Tensor& lse, const Tensor& logits,
                            const Tensor& targets, int64_t ignore_index, const Tensor& count) {
  index_check::raise_pending(logits.device().index);
  dispatch_gpu_float_index(logits.dtype(), targets.dtype(), "cross_entropy", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    const T* px = logits.data_ptr<T>();
    T* pd = dlogits.data_ptr<T>();
    const int64_t rows = logits.shape()[0], classes = logits.shape()[1], ld = logits.strides()[0];
    cross_entropy_backward_kernel<T, I><<<static_cast<unsigned>(rows), row_threads(classes), 0, stream_for(dlogits)>>>(
        pd, grad.data_ptr<T>(), grad.dim() == 0 ? 0 : 1, count.defined() ? count.data_ptr<float>() : nullptr,
        lse.data_ptr<float>(), px, ld, targets.data_ptr<I>(), classes, ignore_index);
    TG_CUDA_CHECK_LAUNCH("cross_entropy_backward");
  });
}

}  // namespace tg::cuda
