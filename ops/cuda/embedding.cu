// CUDA embedding.
//   forward:  one thread per 16-byte pack of an output row when the table's rows are whole aligned
//             packs (else per element, any strides): M * D reads of the table, M * D writes.
//   backward: one thread per element of grad, float32 atomicAdd into dweight[index]: M * D reads
//             and atomics. Repeated indices make the summation order (and so the last bits)
//             vary from run to run.
// An index outside [0, V) reads nothing: its output row is zeros, it adds no gradient, and it
// is reported through the index-error flag (index_check.cuh).
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/cuda/index_check.cuh"
#include "ops/embedding_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

// out [M, D] = weight[indices], P elements per thread: a Pack when vectorised (P = Pack size),
// else one element with the table's own strides.
template <class T, class I, bool kVec>
__global__ void embedding_forward(T* out, const T* weight, int64_t s0, int64_t s1, const I* indices, int64_t count,
                                  int64_t rows, int64_t dim, long long* flag) {
  constexpr int P = kVec ? kPack16<T> : 1;
  const int64_t per_row = dim / P, total = count * per_row;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = k / per_row, c = k % per_row;
    const int64_t idx = static_cast<int64_t>(indices[m]);
    const bool ok = idx >= 0 && idx < rows;
    if (!ok && c == 0) index_check::report(flag, index_check::kEmbedding, idx, rows);
    if constexpr (kVec) {
      using PK = Pack<T, P>;
      PK p;
      if (ok) p = reinterpret_cast<const PK*>(weight + idx * s0)[c];
      else zero_pack(p);
      reinterpret_cast<PK*>(out + m * dim)[c] = p;
    } else {
      out[m * dim + c] = ok ? weight[idx * s0 + c * s1] : cvt<T>(0.f);
    }
  }
}

template <class T, class I>
__global__ void embedding_backward_kernel(float* dweight, const T* grad, const I* indices, int64_t count, int64_t rows,
                                          int64_t dim) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < count * dim; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = k / dim, d = k % dim;
    const int64_t idx = static_cast<int64_t>(indices[m]);
    if (idx >= 0 && idx < rows) atomicAdd(dweight + idx * dim + d, cvt<float>(grad[k]));
  }
}

}  // namespace

void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  const int device = weight.device().index;
  index_check::raise_pending(device);
  dispatch_gpu_float(weight.dtype(), "embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_index(indices.dtype(), "embedding", [&](auto itag) {
      using I = typename decltype(itag)::type;
      cudaStream_t s = stream_for(weight);
      const T* pw = weight.data_ptr<T>();
      T* po = out.data_ptr<T>();
      const int64_t rows = weight.shape()[0], dim = weight.shape()[1], s0 = weight.strides()[0],
                    s1 = weight.strides()[1], count = indices.numel();
      const I* pi = indices.data_ptr<I>();
      long long* flag = index_check::flag(device);
      if (s1 == 1 && aligned(pw, 16) && aligned(po, 16) && dim % kPack16<T> == 0 && s0 % kPack16<T> == 0) {
        const int64_t packs = count * (dim / kPack16<T>);
        embedding_forward<T, I, true><<<blocks_for(packs, kThreads), kThreads, 0, s>>>(po, pw, s0, s1, pi, count,
                                                                                      rows, dim, flag);
      } else {
        embedding_forward<T, I, false><<<blocks_for(count * dim, kThreads), kThreads, 0, s>>>(po, pw, s0, s1, pi,
                                                                                             count, rows, dim, flag);
      }
      TG_CUDA_CHECK_LAUNCH("embedding_forward");
      index_check::watch(device, s);
    });
  });
}

void embedding_backward(const Tensor& dweight, const Tensor& grad, const Tensor& indices) {
  index_check::raise_pending(grad.device().index);
  dispatch_gpu_float(grad.dtype(), "embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_CHECK(dweight.dtype() == kFloat32, "embedding", "the CUDA gradient accumulator must be float32, got ",
             dweight.dtype());
    dispatch_index(indices.dtype(), "embedding", [&](auto itag) {
      using I = typename decltype(itag)::type;
      const int64_t count = indices.numel(), dim = dweight.shape()[1];
      embedding_backward_kernel<T, I><<<blocks_for(count * dim, kThreads), kThreads, 0, stream_for(grad)>>>(
          dweight.data_ptr<float>(), grad.data_ptr<T>(), indices.data_ptr<I>(), count, dweight.shape()[0], dim);
      TG_CUDA_CHECK_LAUNCH("embedding_backward");
    });
  });
}

}  // namespace tg::cuda
