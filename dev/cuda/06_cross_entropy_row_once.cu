/*
cross_entropy_with_grad (linear_cross_entropy's chunks): per row of logits the loss, the
logsumexp and, in place, dlogits = softmax - onehot. The library's kernel (version 1: a block of
1024 threads a row, two blocks a multiprocessor) reads each row twice, the second time mostly
from DRAM again when the rows in flight outgrow the L2 (2 x 132 x 250 KB = 66 MB at 128256
classes). The versions here try to read each row from DRAM once:

  1  the library's kernel as it was (ops/cuda/cross_entropy.cu, kGrad)
  2  1 held to one block a multiprocessor (a dynamic shared-memory pad): 132 rows in flight, so
     the second read should find them in L2
  3  1 with the second pass walking the row backwards: it starts with what was read last, the
     lines the L2 is most likely to still hold
  4  row-once: a thread-block cluster of C CTAs a row, each copying its slice of the row into
     shared memory (cp.async, every copy of the slice in flight at once), the partial (max, sum)
     exchanged through distributed shared memory, dlogits written from shared memory. C is the
     smallest power of two (<= 8) that brings a slice under --budget KB (default 64: three CTAs
     a multiprocessor, so one CTA's arithmetic overlaps another's copies); 512 threads a CTA
     (1024 above 64 KB a slice). This is what the library adopted (ops/cuda/cross_entropy.cu).

Every version is checked against a float64 CPU reference (loss and lse of every row, dlogits of
every 8th row and of the special rows: an ignored target, an out-of-range one, the first and the
last class) and the index-error flag; the program exits 1 on a mismatch. Times are the median of
--reps launches, each after the logits are restored from a pristine copy and a 256 MB memset
(so the launch reads its rows from DRAM), in ms and in TB/s counting one read and one write of
the logits. --sweep also times version 4 at every cluster size (1, 2, 4, 8) and 256 / 512 / 1024
threads that fit.

Build and run (sm_90; a GPU with thread-block clusters):
  nvcc -O3 -std=c++20 -arch=sm_90 --expt-relaxed-constexpr -I. -o ce_row_once dev/cuda/06_cross_entropy_row_once.cu
  ./ce_row_once                      # the five shapes of the task, versions 1-4
  ./ce_row_once --sweep              # + version 4 at every cluster size and block size
  ./ce_row_once --rows 1024 --classes 128256 --dtype bf16 --reps 50
  dev/cuda/06_cross_entropy_row_once.sh OUT_DIR   # builds and runs both, in one device call
*/
#include "common.cuh"

#include <cooperative_groups.h>

#include <string>
#include <utility>

#include "ops/cuda/softmax_rows.cuh"

namespace cg = cooperative_groups;
using tg::bf16;
using tg::OnlineSoftmax;
using tg::cuda::cvt;
using tg::cuda::elem;
using tg::cuda::kPack16;
using tg::cuda::Pack;
using tg::cuda::pack_of;
namespace softmax_rows = tg::cuda::softmax_rows;

constexpr long long kIgnore = -100;

// As ops/cuda/index_check.cuh: the first bad target wins.
__device__ __forceinline__ void report(long long* flag, long long index, long long bound) {
  if (atomicCAS(reinterpret_cast<unsigned long long*>(flag), 0ull, 2ull) == 0ull) {
    flag[1] = index;
    flag[2] = bound;
  }
}

// ---------------------------------------------------------------------------- versions 1-3
// softmax_rows::map_row with the packs walked last to first (version 3).
template <class T, class F>
__device__ __forceinline__ void map_row_backwards(T* row, int64_t n, int t, int nt, F&& f) {
  constexpr int P = kPack16<T>;
  const softmax_rows::RowSplit sp = softmax_rows::split_row(row, n);
  for (int64_t j = t; j < sp.head; j += nt) row[j] = cvt<T>(f(j, cvt<float>(row[j])));
  Pack<T, P>* packs = reinterpret_cast<Pack<T, P>*>(row + sp.head);
  for (int64_t k = sp.packs - 1 - t; k >= 0; k -= nt) {
    const Pack<T, P> v = packs[k];
    float o[P];
#pragma unroll
    for (int q = 0; q < P; ++q) o[q] = f(sp.head + k * P + q, elem(v, q));
    packs[k] = pack_of<T, P>(o);
  }
  for (int64_t j = sp.head + sp.packs * P + t; j < n; j += nt) row[j] = cvt<T>(f(j, cvt<float>(row[j])));
}

// The library's kernel (kBackwards: version 3). The dynamic shared memory of version 2 is a pad.
template <class T, bool kBackwards>
__global__ void ce_two_reads(float* loss, float* lse, T* logits, int64_t ld, const int64_t* targets, int64_t classes,
                             int64_t ignore_index, long long* flag) {
  const int64_t row = blockIdx.x;
  T* x = logits + row * ld;
  const int64_t t = targets[row];
  const bool valid = t != ignore_index && t >= 0 && t < classes;
  const float xt = threadIdx.x == 0 && valid ? cvt<float>(x[t]) : 0.f;
  const OnlineSoftmax<float> st =
      softmax_rows::block_merge(softmax_rows::row_stats(x, classes, threadIdx.x, blockDim.x));
  const float l = st.logsumexp();
  if (threadIdx.x == 0) {
    lse[row] = l;
    if (t == ignore_index) {
      loss[row] = 0.f;
    } else if (!valid) {
      loss[row] = __int_as_float(0x7fc00000);
      report(flag, t, classes);
    } else {
      loss[row] = l - xt;
    }
  }
  if (!valid) {
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) x[j] = cvt<T>(0.f);
    return;
  }
  const float ll = l * softmax_rows::kLog2e;
  auto grad = [=](int64_t j, float v) { return softmax_rows::exp_sub(v, ll) - (j == t ? 1.f : 0.f); };
  if constexpr (kBackwards) {
    map_row_backwards(x, classes, threadIdx.x, blockDim.x, grad);
  } else {
    softmax_rows::map_row(x, x, x, classes, threadIdx.x, blockDim.x,
                          [=](int64_t j, float v, float) { return grad(j, v); });
  }
}

// ---------------------------------------------------------------------------- version 4
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
// f(std::integral_constant<int, r>) for r = 0 .. R-1, unrolled (r is a constant expression).
template <int R, class F>
__device__ __forceinline__ void unrolled(F&& f) {
  [&]<int... r>(std::integer_sequence<int, r...>) { (f(std::integral_constant<int, r>{}), ...); }(
      std::make_integer_sequence<int, R>{});
}

constexpr int kRounds = 8;  // 16-byte packs a thread: a slice is at most kRounds * blockDim.x packs

// A cluster of C CTAs a row (C = 1: no cluster). CTA `rank` owns packs [rank * slice, +slice) of
// the row (rows 16-byte aligned, classes a multiple of the pack): thread t copies packs t,
// t + nt, ... of them into shared memory, all in flight at once (a commit group a round), and
// folds each into its online softmax as its round lands; the CTAs' (max, sum) are merged in
// rank order through distributed shared memory, so every CTA gets the same lse, and each then
// writes its slice as dlogits from shared memory: one read and one write of the row in DRAM.
template <class T, int kThreads>
__global__ void __launch_bounds__(kThreads, kThreads < 1024 ? 1536 / kThreads : 1)
    ce_row_once(float* loss, float* lse, T* logits, int64_t ld, const int64_t* targets, int64_t classes,
                int64_t ignore_index, long long* flag, int slice) {
  constexpr int P = kPack16<T>;
  using Pk = Pack<T, P>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Pk* sm = reinterpret_cast<Pk*>(smem_raw);
  __shared__ float part[2];
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), C = cluster.num_blocks();
  const int64_t row = blockIdx.x / C;
  T* x = logits + row * ld;
  const int64_t k0 = int64_t(rank) * slice;  // the slice's first pack in the row
  const int n = int(min(int64_t(slice), classes / P - k0));  // its packs (the last slice may be short)
  Pk* xs = reinterpret_cast<Pk*>(x) + k0;
  unrolled<kRounds>([&](auto r) {
    const int i = threadIdx.x + r * kThreads;
    if (i < n) cp_async16(&sm[i], &xs[i]);
    cp_async_commit();
  });
  const int64_t t = targets[row];
  const bool valid = t != ignore_index && t >= 0 && t < classes;
  // Read before the cluster barrier, so before any CTA of the row writes.
  const float xt = rank == 0 && threadIdx.x == 0 && valid ? cvt<float>(x[t]) : 0.f;
  OnlineSoftmax<float> st;
  unrolled<kRounds>([&](auto r) {
    cp_async_wait<kRounds - 1 - r>();
    const int i = threadIdx.x + r * kThreads;
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
  cluster.barrier_arrive();  // done with the other CTAs' shared memory; waited for before exit
  const float l = all.logsumexp();
  if (rank == 0 && threadIdx.x == 0) {
    lse[row] = l;
    if (t == ignore_index) {
      loss[row] = 0.f;
    } else if (!valid) {
      loss[row] = __int_as_float(0x7fc00000);
      report(flag, t, classes);
    } else {
      loss[row] = l - xt;
    }
  }
  const float ll = l * softmax_rows::kLog2e;
  const int64_t ts = valid ? t - k0 * P : -1;  // the target's place in the slice (-1: none)
  unrolled<kRounds>([&](auto r) {
    const int i = threadIdx.x + r * kThreads;
    if (i < n) {
      float o[P];
      const Pk pk = sm[i];
#pragma unroll
      for (int q = 0; q < P; ++q)
        o[q] = valid ? softmax_rows::exp_sub(elem(pk, q), ll) - (int64_t(i) * P + q == ts ? 1.f : 0.f) : 0.f;
      xs[i] = pack_of<T, P>(o);
    }
  });
  cluster.barrier_wait();
}

// ---------------------------------------------------------------------------- host
struct Problem {
  int64_t rows, classes;
  bool bf;
};

struct Buffers {
  void* x;         // the logits the kernels rewrite
  void* pristine;  // their initial values
  int64_t* targets;
  float *loss, *lse;
  long long* flag;
  size_t bytes;
  int64_t rows;
};

struct RowOnceShape {
  int cluster, threads;
  int slice;  // packs a CTA
  size_t smem() const { return size_t(slice) * 16; }
};

// The launch shape of version 4 for C CTAs a row, or cluster 0 where it cannot run.
RowOnceShape row_once_shape(const Problem& p, int cluster, int threads) {
  const int P = p.bf ? 8 : 4;
  const int64_t packs = p.classes / P, slice = (packs + cluster - 1) / cluster;
  if (p.classes % P != 0 || slice > int64_t(kRounds) * threads || slice * 16 > 227 * 1024) return {0, threads, 0};
  return {cluster, threads, int(slice)};
}
// Version 4's own choice: the smallest cluster whose slice fits the budget.
RowOnceShape row_once_auto(const Problem& p, int budget_kb) {
  for (int c = 1; c <= 8; c *= 2) {
    const int P = p.bf ? 8 : 4;
    const int64_t slice = (p.classes / P + c - 1) / c;
    if (slice * 16 <= int64_t(budget_kb) * 1024) return row_once_shape(p, c, slice * 16 <= 64 * 1024 ? 512 : 1024);
  }
  return {0, 0, 0};
}

template <class T>
auto row_once_kernel(int threads) {
  return threads == 256 ? ce_row_once<T, 256> : threads == 512 ? ce_row_once<T, 512> : ce_row_once<T, 1024>;
}

template <class T>
cudaError_t launch_row_once(const Problem& p, const Buffers& b, const RowOnceShape& s) {
  auto fn = row_once_kernel<T>(s.threads);  // its attributes set by row_once_clusters, outside the timed launches
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.rows * s.cluster));
  cfg.blockDim = dim3(unsigned(s.threads));
  cfg.dynamicSmemBytes = s.smem();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(s.cluster);
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, fn, b.loss, b.lse, static_cast<T*>(b.x), p.classes, static_cast<const int64_t*>(b.targets),
                            p.classes, int64_t(kIgnore), b.flag, s.slice);
}

// Clusters that can be resident at once (0: this shape cannot launch); sets the kernel's
// shared-memory attributes for the launches of this shape.
template <class T>
int row_once_clusters(const Problem& p, const RowOnceShape& s) {
  auto fn = row_once_kernel<T>(s.threads);
  // No carveout preference: the driver sizes shared memory for the occupancy (as the library)
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(s.smem())) != cudaSuccess) return 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.rows * s.cluster));
  cfg.blockDim = dim3(unsigned(s.threads));
  cfg.dynamicSmemBytes = s.smem();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(s.cluster);
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, fn, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

constexpr size_t kPad = 120 * 1024;

template <class T>
void launch_two_reads(int version, const Problem& p, const Buffers& b) {
  const int threads = p.classes >= 16384 ? 1024 : p.classes >= 2048 ? 512 : 128;
  const size_t pad = version == 2 ? kPad : 0;  // more than half a multiprocessor's shared memory: one block each
  auto fn = version == 3 ? ce_two_reads<T, true> : ce_two_reads<T, false>;
  fn<<<unsigned(p.rows), threads, pad>>>(b.loss, b.lse, static_cast<T*>(b.x), p.classes, b.targets, p.classes,
                                          kIgnore, b.flag);
}

// The float64 reference.
struct Reference {
  std::vector<double> loss, lse;
  std::vector<int64_t> checked_rows;
  std::vector<float> dlogits;  // of checked_rows, one after the other
};

Reference reference(const Problem& p, const std::vector<float>& x, const std::vector<int64_t>& targets) {
  Reference r;
  r.loss.resize(p.rows);
  r.lse.resize(p.rows);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < p.rows; ++i) {
    const float* row = x.data() + i * p.classes;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < p.classes; ++j) m = std::max(m, double(row[j]));
    for (int64_t j = 0; j < p.classes; ++j) s += std::exp(double(row[j]) - m);
    const double l = m + std::log(s);
    const int64_t t = targets[i];
    const bool valid = t != kIgnore && t >= 0 && t < p.classes;
    r.lse[i] = l;
    r.loss[i] = t == kIgnore ? 0.0 : valid ? l - row[t] : NAN;
  }
  for (int64_t i = 0; i < p.rows; ++i)
    if (i % 8 == 0 || i < 8) r.checked_rows.push_back(i);
  r.dlogits.resize(r.checked_rows.size() * p.classes);
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < r.checked_rows.size(); ++c) {
    const int64_t i = r.checked_rows[c], t = targets[i];
    const float* row = x.data() + i * p.classes;
    const bool valid = t != kIgnore && t >= 0 && t < p.classes;
    for (int64_t j = 0; j < p.classes; ++j)
      r.dlogits[c * p.classes + j] = valid ? float(std::exp(double(row[j]) - r.lse[i]) - (j == t ? 1.0 : 0.0)) : 0.f;
  }
  return r;
}

// Whether the GPU's results match the reference (printed per quantity).
bool check_results(const Problem& p, const Buffers& b, const Reference& r) {
  std::vector<float> loss(p.rows), lse(p.rows);
  CUDA_CHECK(cudaMemcpy(loss.data(), b.loss, p.rows * 4, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(lse.data(), b.lse, p.rows * 4, cudaMemcpyDeviceToHost));
  long long flag[4];
  CUDA_CHECK(cudaMemcpy(flag, b.flag, sizeof flag, cudaMemcpyDeviceToHost));
  bool ok = std::isnan(loss[2]) && flag[0] == 2 && flag[1] == p.classes + 5 && flag[2] == p.classes;
  if (!ok) std::printf("  out-of-range target: MISMATCH (loss %g, flag %lld %lld %lld)\n", loss[2], flag[0], flag[1], flag[2]);
  loss[2] = 0.f;  // compared above
  std::vector<float> want_loss(r.loss.begin(), r.loss.end()), want_lse(r.lse.begin(), r.lse.end());
  want_loss[2] = 0.f;
  ok &= check("  loss", loss, want_loss, 1e-5f, 1e-5f);
  ok &= check("  lse", lse, want_lse, 1e-6f, 1e-6f);
  std::vector<float> d;
  for (int64_t i : r.checked_rows) {
    std::vector<float> row = p.bf ? to_host(static_cast<const bf16*>(b.x) + i * p.classes, p.classes)
                                  : to_host(static_cast<const float*>(b.x) + i * p.classes, p.classes);
    d.insert(d.end(), row.begin(), row.end());
  }
  // bf16 dlogits: one rounding (2^-9 relative) of a float32 value; float32: exp2's few ulps
  ok &= check("  dlogits", d, r.dlogits, p.bf ? 4e-3f : 2e-5f, 1e-9f);
  return ok;
}

void restore(const Buffers& b) {
  CUDA_CHECK(cudaMemcpyAsync(b.x, b.pristine, b.bytes, cudaMemcpyDeviceToDevice));
  CUDA_CHECK(cudaMemsetAsync(b.loss, 0xff, b.rows * sizeof(float)));  // nan until written
  CUDA_CHECK(cudaMemsetAsync(b.lse, 0xff, b.rows * sizeof(float)));
  CUDA_CHECK(cudaMemsetAsync(b.flag, 0, 4 * sizeof(long long)));
}

// Median ms of reps launches, each after the logits are restored and a 256 MB memset: the launch
// starts from an L2 holding none of its rows.
template <class F>
double median_ms(const Buffers& b, F&& launch, int reps) {
  static void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  if (!flush) CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < reps + 2; ++i) {
    restore(b);
    CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
    CUDA_CHECK(cudaEventRecord(e0));
    launch();
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) t.push_back(ms);
  }
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Options {
  bool sweep = false;
  int reps = 50, budget_kb = 64;
  int64_t rows = 0, classes = 0;
  std::string dtype = "bf16";
};

template <class T>
bool run_problem(const Problem& p, const Options& o) {
  const size_t n = size_t(p.rows) * p.classes;
  std::vector<float> values = random_values(n, 7 + uint32_t(p.classes), 4.f), rounded;
  for (int64_t i = 0; i < p.rows; ++i)  // a shift a row, so lse differs from row to row
    for (int64_t j = 0; j < p.classes; ++j) values[i * p.classes + j] += float(i % 13) - 6.f;
  Buffers b;
  b.bytes = n * sizeof(T);
  b.rows = p.rows;
  b.pristine = to_device<T>(values, rounded);
  b.x = device_zeros<T>(n);
  std::vector<float> tv = random_values(p.rows, 11, 0.5f, 0.5f);
  std::vector<int64_t> targets(p.rows);
  for (int64_t i = 0; i < p.rows; ++i) targets[i] = std::min<int64_t>(p.classes - 1, int64_t(tv[i] * p.classes));
  targets[1] = kIgnore, targets[2] = p.classes + 5, targets[3] = 0, targets[4] = p.classes - 1;
  CUDA_CHECK(cudaMalloc(&b.targets, p.rows * sizeof(int64_t)));
  CUDA_CHECK(cudaMemcpy(b.targets, targets.data(), p.rows * sizeof(int64_t), cudaMemcpyHostToDevice));
  b.loss = device_zeros<float>(p.rows);
  b.lse = device_zeros<float>(p.rows);
  b.flag = device_zeros<long long>(4);
  const Reference ref = reference(p, rounded, targets);
  const double gb = 2.0 * double(b.bytes) / 1e9;
  std::printf("\n%s %lld x %lld (%.1f MB of logits; a row %.1f KB)\n", p.bf ? "bf16" : "float32", (long long)p.rows,
              (long long)p.classes, b.bytes / 1e6, p.classes * sizeof(T) / 1024.0);

  bool ok = true;
  auto one = [&](const char* name, auto&& launch) {
    restore(b);
    launch();
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("%s\n", name);
    const bool good = check_results(p, b, ref);
    ok &= good;
    const double ms = median_ms(b, launch, o.reps);
    std::printf("  %-44s %8.3f ms %6.2f TB/s%s\n", name, ms, gb / ms, good ? "" : "  (MISMATCH)");
  };
  CUDA_CHECK(cudaFuncSetAttribute(ce_two_reads<T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPad)));
  for (int v = 1; v <= 3; ++v) {
    const char* names[] = {"", "1 library (2 blocks/SM)", "2 library at 1 block/SM", "3 library, second pass backwards"};
    one(names[v], [&] { launch_two_reads<T>(v, p, b); });
  }
  auto row_once = [&](const RowOnceShape& s, const char* what) {
    char name[96];
    const int clusters = row_once_clusters<T>(p, s);
    std::snprintf(name, sizeof name, "4 row-once %s: C %d, %d thr, %.1f KB, %d rows/wave", what, s.cluster, s.threads,
                  s.smem() / 1024.0, clusters);
    if (clusters == 0) {
      std::printf("  %-44s cannot launch\n", name);
      return;
    }
    one(name, [&] { CUDA_CHECK(launch_row_once<T>(p, b, s)); });
  };
  const RowOnceShape chosen = row_once_auto(p, o.budget_kb);
  if (chosen.cluster) row_once(chosen, "auto");
  else std::printf("  4 row-once: no cluster of <= 8 holds a row in %d KB slices\n", o.budget_kb);
  if (o.sweep)
    for (int c = 1; c <= 8; c *= 2)
      for (int threads : {256, 512, 1024}) {
        const RowOnceShape s = row_once_shape(p, c, threads);
        if (s.cluster) row_once(s, "sweep");
      }
  CUDA_CHECK(cudaFree(b.x));
  CUDA_CHECK(cudaFree(b.pristine));
  CUDA_CHECK(cudaFree(b.targets));
  CUDA_CHECK(cudaFree(b.loss));
  CUDA_CHECK(cudaFree(b.lse));
  CUDA_CHECK(cudaFree(b.flag));
  return ok;
}

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) std::fprintf(stderr, "%s wants a value\n", a.c_str()), std::exit(2);
      return std::string(argv[++i]);
    };
    if (a == "--sweep") o.sweep = true;
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--budget") o.budget_kb = std::stoi(next());
    else if (a == "--rows") o.rows = std::stoll(next());
    else if (a == "--classes") o.classes = std::stoll(next());
    else if (a == "--dtype") o.dtype = next();
    else std::fprintf(stderr, "unknown argument %s\n", a.c_str()), std::exit(2);
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s: %d SMs, %.0f MB L2, %zu KB shared memory a block at most\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize / 1e6, prop.sharedMemPerBlockOptin / 1024);
  std::vector<Problem> problems = {{1024, 128256, true}, {2048, 128256, true}, {4096, 32000, true},
                                   {8192, 32000, true},  {2048, 128256, false}};
  if (o.rows > 0) problems = {{o.rows, o.classes, o.dtype == "bf16"}};
  bool ok = true;
  for (const Problem& p : problems) ok &= p.bf ? run_problem<bf16>(p, o) : run_problem<float>(p, o);
  std::printf("\n%s\n", ok ? "all versions match the reference" : "MISMATCH: see above");
  return ok ? 0 : 1;
}
