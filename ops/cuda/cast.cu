// to_packed on CUDA: every tensor of the pack converted in one launch (a step's LoRA adapters are
// a dozen tensors of a few thousand elements; one launch each costs more than their traffic).
// Reads each element once, writes it once.
#include "core/cuda/cuda_utils.cuh"
#include "core/cuda/device_utils.cuh"
#include "ops/cast_kernels.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;

template <class From>
struct Pieces {
  const From* src[kMaxPacked];
  int64_t begin[kMaxPacked + 1];  // piece i is out[begin[i], begin[i + 1])
  int count;
};

template <class To, class From>
__global__ void convert_packed_kernel(To* out, Pieces<From> p) {
  const int64_t total = p.begin[p.count];
  int piece = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    while (i >= p.begin[piece + 1]) ++piece;  // i only grows, so the scan is short
    out[i] = cvt<To>(cvt<float>(p.src[piece][i - p.begin[piece]]));
  }
}

}  // namespace

void convert_packed(const Tensor& out, const std::vector<Tensor>& xs) {
  dispatch_gpu_float(out.dtype(), "to_packed", [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_gpu_float(xs[0].dtype(), "to_packed", [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      Pieces<From> p{};
      p.count = static_cast<int>(xs.size());
      for (size_t i = 0; i < xs.size(); ++i) {
        p.src[i] = xs[i].data_ptr<From>();
        p.begin[i + 1] = p.begin[i] + xs[i].numel();
      }
      convert_packed_kernel<To, From><<<blocks_for(p.begin[p.count], kThreads), kThreads, 0, stream_for(out)>>>(
          out.data_ptr<To>(), p);
      TG_CUDA_CHECK_LAUNCH("to_packed");
    });
  });
}

}  // namespace tg::cuda
