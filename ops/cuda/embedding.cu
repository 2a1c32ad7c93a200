// CUDA embedding.
//   forward:  one thread per 16-byte pack of an output row when the table's rows are whole aligned
//             packs (else per element, any strides): M * D reads of the table, M * D writes.
//   backward: deterministic, as PyTorch's: the M positions sorted by index (CUB's stable radix
//             sort over the index's bits), then one block per distinct index sums its rows of grad
//             in position order into dweight[index] (float32). M * D reads, one write per used
//             element of dweight, no atomics, so the same bits every run.
// An index outside [0, V) reads nothing: its output row is zeros, it adds no gradient, and it
// is reported through the index-error flag (index_check.cuh).
#include <bit>

#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/cuda/index_check.cuh"
#include "ops/cuda/radix_sort.cuh"
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

// keys[m] = indices[m] when in [0, rows), else rows (sorted last, then skipped); pos[m] = m.
template <class I>
__global__ void embedding_sort_keys(uint32_t* keys, int32_t* pos, const I* indices, int64_t count, int64_t rows) {
  for (int64_t m = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; m < count; m += int64_t(gridDim.x) * blockDim.x) {
    const int64_t idx = static_cast<int64_t>(indices[m]);
    keys[m] = static_cast<uint32_t>(idx >= 0 && idx < rows ? idx : rows);
    pos[m] = static_cast<int32_t>(m);
  }
}

// Block j owns the run of equal sorted keys that starts at j (other blocks return): dweight[key]
// += the sum of grad's rows at those positions, in ascending position order.
template <class T>
__global__ void embedding_backward_runs(float* dweight, const T* grad, const uint32_t* keys, const int32_t* pos,
                                        int64_t count, int64_t rows, int64_t dim) {
  const int64_t j = blockIdx.x;
  const uint32_t key = keys[j];
  if (key == rows || (j > 0 && keys[j - 1] == key)) return;
  int64_t end = j + 1;
  while (end < count && keys[end] == key) ++end;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0.f;
    for (int64_t r = j; r < end; ++r) acc += cvt<float>(grad[pos[r] * dim + d]);
    dweight[key * dim + d] += acc;
  }
}

}  // namespace

void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  const int device = weight.device().index;
  index_check::raise_pending(device);
  dispatch_gpu_float_index(weight.dtype(), indices.dtype(), "embedding", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
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
}

void embedding_backward(const Tensor& dweight, const Tensor& grad, const Tensor& indices) {
  index_check::raise_pending(grad.device().index);
  dispatch_gpu_float_index(grad.dtype(), indices.dtype(), "embedding", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    TG_CHECK(dweight.dtype() == kFloat32, "embedding", "the CUDA gradient accumulator must be float32, got ",
             dweight.dtype());
    const int64_t count = indices.numel(), rows = dweight.shape()[0], dim = dweight.shape()[1];
    TG_CHECK(count < (int64_t(1) << 31) && rows < (int64_t(1) << 31), "embedding",
             "the CUDA backward takes fewer than 2^31 indices and rows, got ", count, " indices into ", rows,
             " rows");
    cudaStream_t s = stream_for(grad);
    const Device dev = grad.device();
    // keys and positions, then their sorted copies (int32 tensors hold the uint32 keys)
    Tensor buf = Tensor::empty({4, count}, {kInt32, dev});
    int32_t* b = buf.data_ptr<int32_t>();
    uint32_t *keys = reinterpret_cast<uint32_t*>(b), *sorted_keys = reinterpret_cast<uint32_t*>(b + 2 * count);
    int32_t *pos = b + count, *sorted_pos = b + 3 * count;
    embedding_sort_keys<I><<<blocks_for(count, kThreads), kThreads, 0, s>>>(keys, pos, indices.data_ptr<I>(), count,
                                                                           rows);
    TG_CUDA_CHECK_LAUNCH("embedding_sort_keys");
    const int end_bit = std::bit_width(static_cast<uint64_t>(rows));  // the keys are at most rows
    radix_sort_pairs(keys, sorted_keys, pos, sorted_pos, static_cast<int>(count), end_bit, dev, s);
    embedding_backward_runs<T><<<static_cast<unsigned>(count), 128, 0, s>>>(
        dweight.data_ptr<float>(), grad.data_ptr<T>(), sorted_keys, sorted_pos, count, rows, dim);
    TG_CUDA_CHECK_LAUNCH("embedding_backward");
  });
}

}  // namespace tg::cuda
