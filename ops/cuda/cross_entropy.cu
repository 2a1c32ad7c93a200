// CUDA cross_entropy, float32 accumulation, one block per row of logits.
//   forward:  reads the row once (online max + sum, in 16-byte packs) and the target's
//             logit, writes two floats per row (loss, logsumexp): N * V reads, 2N writes.
//             With the gradient (cross_entropy_with_grad) the block then rewrites its row as
//             dlogits: N * V more reads (mostly from L2) and N * V writes, one launch.
//   reduce:   one block sums the N row losses and counts the targets not ignored.
//   backward: reads the row once more and writes dlogits = g * (exp(x - lse) - onehot):
//             N * V reads, N * V writes. The N x V softmax is never stored.
// Targets outside [0, V) (other than ignore_index) read nothing: their loss is nan, their
// gradient row zero, and they are reported through the index-error flag (index_check.cuh).
#include <limits>

#include "core/cuda/cuda_utils.cuh"
#include "ops/cross_entropy_kernels.h"
#include "ops/cuda/index_check.cuh"
#include "ops/cuda/nn_common.cuh"

namespace tg::cuda {
namespace {

constexpr int kReduceThreads = 1024;

int row_threads(int64_t v) { return v >= 16384 ? 1024 : v >= 2048 ? 512 : 128; }

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
  const OnlineSoftmax<float> st = nn::block_merge(nn::row_stats(x, classes, threadIdx.x, blockDim.x));
  const float l = st.logsumexp();
  if (threadIdx.x == 0) {
    lse[row] = l;
    if (t == ignore_index) {
      loss[row] = 0.f;
    } else if (!valid) {
      loss[row] = std::numeric_limits<float>::quiet_NaN();
      index_check::report(flag, index_check::kCrossEntropy, t, classes);
    } else {
      loss[row] = l - xt;
    }
  }
  if constexpr (kGrad) {
    if (!valid) {
      for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) x[j] = cvt<T>(0.f);
      return;
    }
    const float ll = l * nn::kLog2e;
    nn::map_row(x, x, x, classes, threadIdx.x, blockDim.x,
                [=](int64_t j, float v, float) { return nn::exp_sub(v, ll) - (j == t ? 1.f : 0.f); });
  }
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
  sum = nn::block_sum(sum);
  n = nn::block_sum(n);
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
  const float scale = cvt<float>(grad[row * grad_step]) / (count ? count[0] : 1.f), ll = lse[row] * nn::kLog2e;
  const T* x = logits + row * ld;
  nn::map_row(d, x, x, classes, threadIdx.x, blockDim.x,
              [=](int64_t j, float v, float) { return scale * (nn::exp_sub(v, ll) - (j == t ? 1.f : 0.f)); });
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
