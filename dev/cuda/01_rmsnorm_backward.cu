/*
RMSNorm backward with a frozen weight (dx alone): the kernel versions the library's norm kernels
came from, each checked against a CPU reference and timed from an L2 full of a flush's dirty
lines (as bench/norm_bench.cu). The library keeps version 2 (with version 3's policy for small
launches) and, for rows whose register kernel fits one block a multiprocessor, version 5; the
others are the experiments dev/NOTES.md reports.

  1  naive: a block per row, scalar loads, both passes from global memory
  2  register-resident rows: 16-byte vectors, TPR threads a row (--tpr), the row kept in
     registers between its two passes (the library's layout)
  3  2 with every row read under an L2 evict-first policy (the library's choice for launches that
     move little data for the L2's size)
  4  2 with torch.compile's hints: first read evict-last (L1 and L2), the second pass re-reading
     the row evict-first instead of keeping it in registers
  5  staged: one row a block, thread 0 keeps --stages rows in flight in shared memory with
     Hopper's bulk copies (cp.async.bulk + mbarrier), --blocks blocks a multiprocessor

Build and run (sm_90):
  nvcc -O3 -std=c++17 -arch=sm_90 -o rmsnorm_backward dev/cuda/01_rmsnorm_backward.cu
  ./rmsnorm_backward 2 --dtype bf16 --rows 8192 --dim 8192 --tpr 512
  ./rmsnorm_backward 2 --sweep-tpr            # every threads-per-row that fits the row
  ./rmsnorm_backward 5 --dtype fp32 --stages 3 --blocks 1
*/
#include "common.cuh"

#include <string>

// ---------------------------------------------------------------------------- device helpers
template <class T>
constexpr int kN = 16 / int(sizeof(T));  // elements in a 16-byte vector

struct Args {
  const void* x;
  const void* dy;
  const void* w;
  const float* rstd;
  void* dx;
  int rows, dim, nv, tpr, gpb;
  float inv_dim;
};

// Element e of a 16-byte vector held as four words, widened to float.
template <class T>
__device__ __forceinline__ float elem(const uint4& v, int e) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (sizeof(T) == 4) return __uint_as_float(w[e]);
  else return __uint_as_float(e % 2 ? w[e / 2] & 0xffff0000u : w[e / 2] << 16);
}
// kN<T> floats rounded to T as one vector (bf16 two per instruction).
template <class T>
__device__ __forceinline__ uint4 pack(const float* f) {
  unsigned w[4];
  if constexpr (sizeof(T) == 4) {
    #pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = __float_as_uint(f[e]);
  } else {
    #pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[e], f[e + 1]);
      std::memcpy(&w[e / 2], &h, 4);
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

enum Hint { kPlain, kEvictFirst, kCompile };

__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t policy_evict_last() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint4 load_l2(const void* p, uint64_t pol) {
  uint4 r;
  asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
  return r;
}
// A 16-byte load under L2 policy `pol`, kept in L1 at evict-last (EVICT_LAST) or evict-first priority.
template <bool EVICT_LAST>
__device__ __forceinline__ uint4 load_l1_l2(const void* p, uint64_t pol) {
  uint4 r;
  if constexpr (EVICT_LAST)
    asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
  else
    asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
  return r;
}

// v summed over the tpr threads of a row group; groups wider than a warp are the whole block
// (the warp sums go through shared memory, double-buffered by `phase`).
__device__ __forceinline__ float group_sum(float v, int tpr, float* smem, int& phase) {
  for (int off = 16; off >= 1; off >>= 1)
    if (off < tpr) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (tpr <= 32) return v;
  float* buf = smem + phase * 32;
  phase ^= 1;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  v = lane < (tpr >> 5) ? buf[lane] : 0.f;
  for (int off = 16; off >= 1; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// dx = rstd * g - c * x, c = rstd^3 * sum(g * x) / dim (the library's rounding order).
__device__ __forceinline__ float coef(float sum, float rs, float inv_dim) {
  return __fmul_rn(__fmul_rn(__fmul_rn(rs, __fmul_rn(sum, inv_dim)), rs), rs);
}

// ---------------------------------------------------------------------------- kernel 1
template <class T>
__global__ void rmsnorm_backward1(Args a) {
  __shared__ float smem[64];
  int phase = 0;
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  const T* w = static_cast<const T*>(a.w);
  T* dx = static_cast<T*>(a.dx);
  for (int row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const size_t off = size_t(row) * a.dim;
    float s = 0.f;
    for (int j = threadIdx.x; j < a.dim; j += blockDim.x)
      s = __fmaf_rn(__fmul_rn(float(dy[off + j]), float(w[j])), float(x[off + j]), s);
    s = group_sum(s, blockDim.x, smem, phase);
    const float rs = a.rstd[row], c = coef(s, rs, a.inv_dim);
    for (int j = threadIdx.x; j < a.dim; j += blockDim.x) {
      const float g = __fmul_rn(float(dy[off + j]), float(w[j]));
      dx[off + j] = T(__fmaf_rn(-c, float(x[off + j]), __fmul_rn(rs, g)));
    }
  }
}

// ---------------------------------------------------------------------------- kernels 2, 3, 4
template <class T, int ITERS, Hint H>
__global__ void __launch_bounds__(ITERS >= 16 ? 256 : 512) rmsnorm_backward_registers(Args a) {
  constexpr int N = kN<T>;
  __shared__ float smem[64];
  int phase = 0;
  const int group = a.gpb == 1 ? 0 : int(threadIdx.x) / a.tpr, lane = a.gpb == 1 ? int(threadIdx.x) : int(threadIdx.x) % a.tpr;
  const uint4* x = static_cast<const uint4*>(a.x);
  const uint4* dy = static_cast<const uint4*>(a.dy);
  const uint4* w = static_cast<const uint4*>(a.w);
  uint4* dx = static_cast<uint4*>(a.dx);
  uint64_t first = 0, last = 0;
  if (H != kPlain) first = policy_evict_first();
  if (H == kCompile) last = policy_evict_last();
  for (int base = blockIdx.x * a.gpb; base < a.rows; base += gridDim.x * a.gpb) {
    const int row = base + group;
    const bool valid = row < a.rows;
    const size_t off = size_t(row) * a.nv;
    uint4 xv[ITERS], dyv[ITERS], wv[ITERS];
    bool in[ITERS];
    #pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int v = lane + i * a.tpr;
      in[i] = valid && v < a.nv;
      xv[i] = dyv[i] = wv[i] = make_uint4(0, 0, 0, 0);
      if (!in[i]) continue;
      if (H == kPlain) {
        xv[i] = x[off + v];
        dyv[i] = dy[off + v];
      } else if (H == kEvictFirst) {
        xv[i] = load_l2(x + off + v, first);
        dyv[i] = load_l2(dy + off + v, first);
      } else {
        xv[i] = load_l1_l2<true>(x + off + v, last);
        dyv[i] = load_l1_l2<true>(dy + off + v, last);
      }
      wv[i] = __ldg(w + v);
    }
    float s = 0.f;
    #pragma unroll
    for (int i = 0; i < ITERS; ++i)
      #pragma unroll
      for (int e = 0; e < N; ++e)
        s = __fmaf_rn(__fmul_rn(elem<T>(dyv[i], e), elem<T>(wv[i], e)), elem<T>(xv[i], e), s);
    s = group_sum(s, a.tpr, smem, phase);
    const float rs = valid ? a.rstd[row] : 0.f, c = coef(s, rs, a.inv_dim);
    #pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      if (!in[i]) continue;
      const int v = lane + i * a.tpr;
      if (H == kCompile) {  // the second read, demoted after use, instead of registers
        xv[i] = load_l1_l2<false>(x + off + v, first);
        dyv[i] = load_l1_l2<false>(dy + off + v, first);
      }
      float out[N];
      #pragma unroll
      for (int e = 0; e < N; ++e) {
        const float g = __fmul_rn(elem<T>(dyv[i], e), elem<T>(wv[i], e));
        out[e] = __fmaf_rn(-c, elem<T>(xv[i], e), __fmul_rn(rs, g));
      }
      dx[off + v] = pack<T>(out);
    }
  }
}

// ---------------------------------------------------------------------------- kernel 5
__device__ __forceinline__ unsigned smem_u32(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

template <class T, int ITERS>
__global__ void __launch_bounds__(512) rmsnorm_backward5(Args a, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int N = kN<T>;
  constexpr int kHeader = 128;  // the mbarriers
  extern __shared__ __align__(128) unsigned char staged[];
  __shared__ float smem[64];
  int phase = 0;
  uint64_t* bars = reinterpret_cast<uint64_t*>(staged);
  const unsigned row_bytes = unsigned(a.dim) * sizeof(T);
  auto stage = [&](int s) { return staged + kHeader + size_t(s) * 2 * row_bytes; };
  const int lane = threadIdx.x, first = blockIdx.x, step = gridDim.x;
  const int mine = first < a.rows ? (a.rows - first + step - 1) / step : 0;
  auto issue = [&](int k) {  // thread 0: row k of this block (x, then dy) into stage k % stages
    const int s = k % stages;
    const size_t row = size_t(first) + size_t(k) * step;
    const unsigned bar = smem_u32(&bars[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(2 * row_bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(stage(s))),
                 "l"(static_cast<const T*>(a.x) + row * a.dim), "r"(row_bytes), "r"(bar) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(stage(s) + row_bytes)),
                 "l"(static_cast<const T*>(a.dy) + row * a.dim), "r"(row_bytes), "r"(bar) : "memory");
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bars[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int k = 0; k < mine && k < stages; ++k) issue(k);
  uint4 wv[ITERS];
  #pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    const int v = lane + i * a.tpr;
    wv[i] = v < a.nv ? __ldg(static_cast<const uint4*>(a.w) + v) : make_uint4(0, 0, 0, 0);
  }
  for (int k = 0; k < mine; ++k) {
    const int s = k % stages;
    const size_t row = size_t(first) + size_t(k) * step;
    const unsigned bar = smem_u32(&bars[s]), parity = (k / stages) & 1;
    asm volatile(
        "{\n.reg .pred P1;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n@P1 bra DONE;\n"
        "bra WAIT;\nDONE:\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
    const uint4* xs = reinterpret_cast<const uint4*>(stage(s));
    const uint4* dys = reinterpret_cast<const uint4*>(stage(s) + row_bytes);
    uint4 xv[ITERS], dyv[ITERS];
    float sum = 0.f;
    #pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int v = lane + i * a.tpr;
      xv[i] = v < a.nv ? xs[v] : make_uint4(0, 0, 0, 0);
      dyv[i] = v < a.nv ? dys[v] : make_uint4(0, 0, 0, 0);
      #pragma unroll
      for (int e = 0; e < N; ++e)
        sum = __fmaf_rn(__fmul_rn(elem<T>(dyv[i], e), elem<T>(wv[i], e)), elem<T>(xv[i], e), sum);
    }
    sum = group_sum(sum, a.tpr, smem, phase);  // its barrier: every thread has its vectors
    if (threadIdx.x == 0 && k + stages < mine) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(k + stages);
    }
    const float rs = a.rstd[row], c = coef(sum, rs, a.inv_dim);
    #pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int v = lane + i * a.tpr;
      if (v >= a.nv) continue;
      float out[N];
      #pragma unroll
      for (int e = 0; e < N; ++e) {
        const float g = __fmul_rn(elem<T>(dyv[i], e), elem<T>(wv[i], e));
        out[e] = __fmaf_rn(-c, elem<T>(xv[i], e), __fmul_rn(rs, g));
      }
      static_cast<uint4*>(a.dx)[row * a.nv + v] = pack<T>(out);
    }
  }
#else
  __trap();  // bulk copies need sm_90
#endif
}

// ---------------------------------------------------------------------------- host
template <int I, class F>
bool with_iters(int iters, F&& f) {
  if constexpr (I > 16) {
    return false;
  } else {
    if (iters == I) return f(std::integral_constant<int, I>{}), true;
    return with_iters<I * 2>(iters, f);
  }
}

struct Options {
  int kernel = 2, rows = 8192, dim = 8192, tpr = 512, stages = 3, blocks = 0, reps = 100;
  bool bf16 = true, sweep = false;
};

// Vectors a thread for `tpr` threads a row (a power of two <= 16), 0 if the row does not fit.
int iters_for(int nv, int tpr) {
  int it = 1;
  while (it < 16 && it * tpr < nv) it *= 2;
  return it * tpr >= nv ? it : 0;
}

template <class T>
double run(const Options& o, Args a, int tpr) {
  a.tpr = tpr;
  const int iters = iters_for(a.nv, tpr);
  if (o.kernel == 1) {
    a.tpr = 256;
    return median_us([&] { rmsnorm_backward1<T><<<a.rows, 256>>>(a); }, o.reps);
  }
  if (!iters) return -1;
  // Rows of at most 32 threads share 256-thread blocks; wider rows get a block (warp multiples).
  a.gpb = tpr <= 32 ? 256 / tpr : 1;
  const int block = tpr * a.gpb;
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  double us = -1;
  with_iters<1>(iters, [&](auto it) {
    constexpr int IT = decltype(it)::value;
    if (o.kernel == 5) {
      if constexpr (IT * kN<T> <= 16) {  // more elements a thread spill (the library's bound)
        const size_t smem = 128 + size_t(o.stages) * 2 * a.dim * sizeof(T);
        auto* k = rmsnorm_backward5<T, IT>;
        CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        int fit = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, k, block, smem));
        if (fit < 1) return;
        const int per_sm = o.blocks ? std::min(o.blocks, fit) : fit;
        us = median_us([&] { k<<<sms * per_sm, block, smem>>>(a, o.stages); }, o.reps);
      }
      return;
    }
    const int grid = (a.rows + a.gpb - 1) / a.gpb;  // a block per row group
    auto launch = [&](auto* k) { us = median_us([&] { k<<<grid, block>>>(a); }, o.reps); };
    if (o.kernel == 2) launch(rmsnorm_backward_registers<T, IT, kPlain>);
    if (o.kernel == 3) launch(rmsnorm_backward_registers<T, IT, kEvictFirst>);
    if (o.kernel == 4) launch(rmsnorm_backward_registers<T, IT, kCompile>);
  });
  return us;
}

template <class T>
int main_typed(const Options& o) {
  const size_t n = size_t(o.rows) * o.dim;
  std::vector<float> hx, hdy, hw;
  T* x = to_device<T>(random_values(n, 1), hx);
  T* dy = to_device<T>(random_values(n, 2), hdy);
  T* w = to_device<T>(random_values(o.dim, 3, 0.2f, 1.f), hw);
  // rstd as the forward would have saved it, and the CPU reference (double accumulation).
  std::vector<float> rstd(o.rows), want(n);
  for (int r = 0; r < o.rows; ++r) {
    double ss = 0, sgx = 0;
    for (int j = 0; j < o.dim; ++j) ss += double(hx[size_t(r) * o.dim + j]) * hx[size_t(r) * o.dim + j];
    rstd[r] = float(1.0 / std::sqrt(ss / o.dim + 1e-5));
    for (int j = 0; j < o.dim; ++j) sgx += double(hdy[size_t(r) * o.dim + j]) * hw[j] * hx[size_t(r) * o.dim + j];
    const double c = double(rstd[r]) * rstd[r] * rstd[r] * sgx / o.dim;
    for (int j = 0; j < o.dim; ++j) {
      const size_t i = size_t(r) * o.dim + j;
      want[i] = float(rstd[r] * double(hdy[i]) * hw[j] - c * hx[i]);
    }
  }
  float* drstd = nullptr;
  T* dx = nullptr;
  CUDA_CHECK(cudaMalloc(&drstd, o.rows * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(drstd, rstd.data(), o.rows * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMalloc(&dx, n * sizeof(T)));
  Args a{x, dy, w, drstd, dx, o.rows, o.dim, int(o.dim / kN<T>), 0, 1, 1.f / o.dim};
  // Bytes no implementation avoids: read x, dy, w, rstd; write dx.
  const double bytes = 3.0 * n * sizeof(T) + o.dim * sizeof(T) + o.rows * 4.0;
  std::vector<int> tprs = {o.tpr};
  if (o.sweep) tprs = {4, 8, 16, 32, 64, 128, 256, 512};
  bool ok = true;
  for (int tpr : tprs) {
    CUDA_CHECK(cudaMemset(dx, 0, n * sizeof(T)));
    const double us = run<T>(o, a, tpr);
    if (us < 0) {
      std::printf("kernel %d, tpr %d: does not fit this row\n", o.kernel, tpr);
      continue;
    }
    std::printf("kernel %d, %s %dx%d, tpr %d: %.1f us, %.0f GB/s; ", o.kernel, o.bf16 ? "bf16" : "fp32", o.rows, o.dim,
                o.kernel == 1 ? 256 : tpr, us, bytes / us / 1e3);
    ok = check("dx", to_host(dx, n), want, o.bf16 ? 2e-2f : 1e-4f, o.bf16 ? 2e-2f : 1e-5f) && ok;
  }
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (f == "--rows") o.rows = next();
    else if (f == "--dim") o.dim = next();
    else if (f == "--tpr") o.tpr = next();
    else if (f == "--stages") o.stages = next();
    else if (f == "--blocks") o.blocks = next();
    else if (f == "--reps") o.reps = next();
    else if (f == "--sweep-tpr") o.sweep = true;
    else if (f == "--dtype" && i + 1 < argc) o.bf16 = std::string(argv[++i]) == "bf16";
    else if (f[0] != '-') o.kernel = std::atoi(f.c_str());
    else {
      std::fprintf(stderr, "usage: %s [1-5] [--dtype bf16|fp32] [--rows R] [--dim D] [--tpr T] [--sweep-tpr] "
                           "[--stages S] [--blocks B] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  if (o.kernel < 1 || o.kernel > 5 || o.dim * (o.bf16 ? 2 : 4) % 16 || o.stages < 1) {
    std::fprintf(stderr, "kernel 1-5, rows of whole 16-byte vectors, --stages >= 1\n");
    return 2;
  }
  return o.bf16 ? main_typed<__nv_bfloat16>(o) : main_typed<float>(o);
}
