// CUDA clamped_swiglu over [rows, 2I] interleaved gate / up (any row stride) -> [rows, I], float32 /
// bfloat16 computed in float32: a thread an output, its gate and up adjacent, so a warp reads 64
// consecutive values and writes 32. Traffic: forward reads gate_up once and writes out once;
// backward reads g and gate_up once and writes dgate_up once.
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/clamped_swiglu_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void clamped_swiglu_kernel(T* out, const T* in, int64_t rows, int64_t width, int64_t ld, float alpha,
                                      float limit) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * width;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, at = r * ld + 2 * (i - r * width);
    const float g = fminf(cvt<float>(in[at]), limit), u = fminf(fmaxf(cvt<float>(in[at + 1]), -limit), limit);
    out[i] = cvt<T>((u + 1.f) * g / (1.f + __expf(-alpha * g)));
  }
}

template <class T>
__global__ void clamped_swiglu_backward_kernel(T* d, const T* gout, const T* in, int64_t rows, int64_t width,
                                               int64_t ld, float alpha, float limit) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * width;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, at = r * ld + 2 * (i - r * width);
    const float a = cvt<float>(in[at]), b = cvt<float>(in[at + 1]), go = cvt<float>(gout[i]);
    const float g = fminf(a, limit), u = fminf(fmaxf(b, -limit), limit), s = 1.f / (1.f + __expf(-alpha * g));
    d[2 * i] = cvt<T>(a <= limit ? go * (u + 1.f) * s * (1.f + alpha * g * (1.f - s)) : 0.f);
    d[2 * i + 1] = cvt<T>(fabsf(b) <= limit ? go * g * s : 0.f);
  }
}

}  // namespace

void clamped_swiglu(const Tensor& out, const Tensor& gate_up, double alpha, double limit) {
  const int64_t rows = out.shape()[0], width = out.shape()[1];
  dispatch_gpu_float(out.dtype(), "clamped_swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    clamped_swiglu_kernel<T><<<blocks_for(rows * width, kThreads), kThreads, 0, stream_for(out)>>>(
        out.data_ptr<T>(), gate_up.data_ptr<T>(), rows, width, gate_up.strides()[0], static_cast<float>(alpha),
        static_cast<float>(limit));
    TG_CUDA_CHECK_LAUNCH("clamped_swiglu");
  });
}

void clamped_swiglu_backward(const Tensor& dgate_up, const Tensor& g, const Tensor& gate_up, double alpha,
                             double limit) {
  const int64_t rows = g.shape()[0], width = g.shape()[1];
  dispatch_gpu_float(g.dtype(), "clamped_swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    clamped_swiglu_backward_kernel<T><<<blocks_for(rows * width, kThreads), kThreads, 0, stream_for(g)>>>(
        dgate_up.data_ptr<T>(), g.data_ptr<T>(), gate_up.data_ptr<T>(), rows, width, gate_up.strides()[0],
        static_cast<float>(alpha), static_cast<float>(limit));
    TG_CUDA_CHECK_LAUNCH("clamped_swiglu_backward");
  });
}

}  // namespace tg::cuda
