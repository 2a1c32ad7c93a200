// CUDA index_copy_: one thread per element of source, copied as raw words of the element's width
// (so one kernel per width serves every dtype). An index entry out of range writes nothing and is
// reported through the index-error flag (index_check.cuh).
// Memory traffic: source read once, its elements written once into self.
#include <cstdint>

#include "core/cuda/cuda_utils.cuh"
#include "core/detail/type_dispatch.h"
#include "ops/cuda/index_check.cuh"
#include "ops/index_copy_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

template <class W, class I>
__global__ void index_copy_kernel(W* self, const W* source, const I* index, int64_t count, int64_t size,
                                  int64_t inner, int64_t total, long long* flag) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k % inner, i = (k / inner) % count, o = k / (inner * count);
    const int64_t at = static_cast<int64_t>(index[i]);
    if (at < 0 || at >= size) {
      if (r == 0) index_check::report(flag, index_check::kIndexCopy, at, size);
      continue;
    }
    self[(o * size + at) * inner + r] = source[k];
  }
}

template <class W>
void launch(const Tensor& self, const Tensor& index, const Tensor& source, int64_t size, int64_t inner) {
  const int device = self.device().index;
  const int64_t total = source.numel(), count = index.numel();
  cudaStream_t s = stream_for(self);
  dispatch_index(index.dtype(), "index_copy_", [&](auto tag) {
    using I = typename decltype(tag)::type;
    index_copy_kernel<W, I><<<blocks_for(total, kThreads), kThreads, 0, s>>>(
        static_cast<W*>(self.data_ptr()), static_cast<const W*>(source.data_ptr()), index.data_ptr<I>(), count, size,
        inner, total, index_check::flag(device));
    TG_CUDA_CHECK_LAUNCH("index_copy_");
  });
  index_check::watch(device, s);
}

}  // namespace

void index_copy(const Tensor& self, const Tensor& index, const Tensor& source, int64_t outer, int64_t size,
                int64_t inner) {
  (void)outer;  // total / (count * inner)
  index_check::raise_pending(self.device().index);
  switch (element_size(self.dtype())) {
    case 1: return launch<uint8_t>(self, index, source, size, inner);
    case 2: return launch<uint16_t>(self, index, source, size, inner);
    case 4: return launch<uint32_t>(self, index, source, size, inner);
    case 8: return launch<uint64_t>(self, index, source, size, inner);
    default:
      fail("index_copy_", "no CUDA copy for elements of ", element_size(self.dtype()), " bytes (", self.dtype(), ")");
  }
}

}  // namespace tg::cuda
