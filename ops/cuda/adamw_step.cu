// The fused AdamW step on CUDA, as a multi-tensor apply (PyTorch's multi_tensor_apply, apex's
// fused Adam): one launch updates up to kAdamWTensorsPerLaunch tensors. Their pointers and sizes
// travel in a struct passed by value as kernel parameters; the lr, weight decay and step count are
// read from device memory by a one-block launch before it (a CUDA graph of the step then replays
// with the current ones), so nothing is allocated or waited for; a longer list takes two more
// launches per 64 tensors.
#include <climits>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "core/trace.h"
#include "ops/adamw_step_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 4 * kThreads;  // elements per block: four per thread
constexpr int64_t kMaxBlocks = INT_MAX;   // grid.x

struct TensorArgs {
  void* p;
  const void* g;
  float* m;
  float* v;
  int64_t n;
  const double* counters;  // [1..3]: the tensor's AdamWScale, written by adamw_count_step_kernel
  int first_block;  // the launch's blocks first_block, first_block + 1, ... update this tensor
};
struct LaunchArgs {
  TensorArgs t[kAdamWTensorsPerLaunch];
  int count;
};
struct CountArgs {
  double* counters[kAdamWTensorsPerLaunch];
  const double* lr_wd[kAdamWTensorsPerLaunch];
  int count;
};
// The kernel-parameter limit every toolkit and architecture accepts.
static_assert(sizeof(LaunchArgs) + sizeof(AdamWHyper<float>) <= 4096, "AdamW launch arguments exceed 4 KiB");
static_assert(sizeof(CountArgs) + 2 * sizeof(double) <= 4096, "AdamW count arguments exceed 4 KiB");

// Thread k counts tensor k's step and writes its scalars (ops/adamw_step_kernels.h: adamw_scale).
__global__ void adamw_count_step_kernel(CountArgs args, double beta1, double beta2) {
  const int k = static_cast<int>(threadIdx.x);
  if (k >= args.count) return;
  double* c = args.counters[k];
  const double t = c[0] + 1.0;
  const AdamWScale<double> s = adamw_scale(args.lr_wd[k][0], args.lr_wd[k][1], t, beta1, beta2);
  c[0] = t;
  c[1] = s.decay;
  c[2] = s.step_size;
  c[3] = s.inv_sqrt_bc2;
}

// adamw_update (ops/adamw_step_kernels.h) on every element of the launch's tensors. Block b
// updates elements [kChunk c, kChunk (c + 1)) of the tensor that holds block b (c: b's index among
// that tensor's blocks), found by a binary search over first_block; each thread updates four
// consecutive elements, with one vector load/store per tensor when they are aligned. T: the
// parameter's and grad's type (float or bfloat16); moments and math in float32.
// Memory traffic: reads p, g, m, v and writes p, m, v once each: 28 bytes per float32 element,
// 22 per bfloat16 one. No shared memory or reduction: bandwidth bound.
template <class T>
__global__ void __launch_bounds__(kThreads) adamw_multi_tensor_kernel(LaunchArgs args, AdamWHyper<float> h) {
  const int b = static_cast<int>(blockIdx.x);
  int lo = 0, hi = args.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (args.t[mid].first_block <= b) lo = mid;
    else hi = mid - 1;
  }
  const TensorArgs& a = args.t[lo];
  // As the host casts them: float64 scalars rounded to float32.
  const AdamWScale<float> scale{static_cast<float>(a.counters[1]), static_cast<float>(a.counters[2]),
                                static_cast<float>(a.counters[3])};
  const int64_t i = static_cast<int64_t>(b - a.first_block) * kChunk + 4 * static_cast<int64_t>(threadIdx.x);
  if (i >= a.n) return;
  T* p = static_cast<T*>(a.p) + i;
  const T* g = static_cast<const T*>(a.g) + i;
  float* m = a.m + i;
  float* v = a.v + i;
  if (i + 4 <= a.n && aligned(p, sizeof(Pack<T, 4>)) && aligned(g, sizeof(Pack<T, 4>)) && aligned(m, 16) &&
      aligned(v, 16)) {
    Pack<T, 4> pv = *reinterpret_cast<const Pack<T, 4>*>(p);
    const Pack<T, 4> gv = *reinterpret_cast<const Pack<T, 4>*>(g);
    Pack<float, 4> mv = *reinterpret_cast<const Pack<float, 4>*>(m), vv = *reinterpret_cast<const Pack<float, 4>*>(v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float pf = cvt<float>(pv.get(k)), mf = mv.get(k), vf = vv.get(k);
      adamw_update(pf, mf, vf, cvt<float>(gv.get(k)), h, scale);
      pv.set(k, cvt<T>(pf));
      mv.set(k, mf);
      vv.set(k, vf);
    }
    *reinterpret_cast<Pack<T, 4>*>(p) = pv;
    *reinterpret_cast<Pack<float, 4>*>(m) = mv;
    *reinterpret_cast<Pack<float, 4>*>(v) = vv;
    return;
  }
  const int64_t len = a.n - i < 4 ? a.n - i : 4;
  for (int64_t k = 0; k < len; ++k) {
    float pf = cvt<float>(p[k]);
    adamw_update(pf, m[k], v[k], cvt<float>(g[k]), h, scale);
    p[k] = cvt<T>(pf);
  }
}

}  // namespace

void adamw_step(const std::vector<AdamWSlot>& slots, const AdamWHyper<double>& hyper) {
  if (slots.empty()) return;
  dispatch_gpu_float(slots[0].param.dtype(), "adamw_step_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cudaStream_t stream = stream_for(slots[0].param);
    const AdamWHyper<float> h{static_cast<float>(hyper.one_minus_beta1), static_cast<float>(hyper.beta2),
                              static_cast<float>(hyper.one_minus_beta2), static_cast<float>(hyper.eps),
                              static_cast<float>(hyper.beta1)};
    LaunchArgs args{};
    CountArgs counts{};
    int64_t blocks = 0;
    auto launch = [&] {
      counts.count = args.count;
      adamw_count_step_kernel<<<1, kAdamWTensorsPerLaunch, 0, stream>>>(counts, hyper.beta1, hyper.beta2);
      TG_CUDA_CHECK_LAUNCH("adamw_step");
      adamw_multi_tensor_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args, h);
      TG_CUDA_CHECK_LAUNCH("adamw_step");
      KernelTrace::record("adamw_step.cuda_launch");
      args.count = 0;
      blocks = 0;
    };
    for (const AdamWSlot& s : slots) {
      const int64_t n = s.param.numel(), nb = (n + kChunk - 1) / kChunk;
      TG_CHECK(nb <= kMaxBlocks, "adamw_step_", "a tensor of ", n, " elements, wants at most ", kMaxBlocks * kChunk);
      if (args.count == kAdamWTensorsPerLaunch || blocks + nb > kMaxBlocks) launch();
      counts.counters[args.count] = s.counters.data_ptr<double>();
      counts.lr_wd[args.count] = s.lr_wd.data_ptr<double>();
      args.t[args.count++] = {s.param.data_ptr(), s.grad.data_ptr(), s.exp_avg.data_ptr<float>(),
                              s.exp_avg_sq.data_ptr<float>(), n, s.counters.data_ptr<double>(),
                              static_cast<int>(blocks)};
      blocks += nb;
    }
    launch();
  });
}

}  // namespace tg::cuda
