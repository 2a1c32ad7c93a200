// CPU embedding. Forward copies one D-row per index (rows split across threads). Backward
// scatter-adds: duplicate indices would race if rows were split, so threads split the D columns
// instead and each walks every index over its own column range (no two threads touch one value).
#include <algorithm>

#include "core/parallel.h"
#include "core/detail/type_dispatch.h"
#include "ops/embedding_kernels.h"

namespace tg::cpu {

void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  dispatch_floating_index(weight.dtype(), indices.dtype(), "embedding", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    const T* pw = weight.data_ptr<T>();
    const I* pi = indices.data_ptr<I>();
    T* po = out.data_ptr<T>();
    const int64_t rows = weight.shape()[0], dim = weight.shape()[1];
    const int64_t s0 = weight.strides()[0], s1 = weight.strides()[1];
    parallel_for(0, indices.numel(), std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(dim, 1)),
                 [&](int64_t b, int64_t e) {
      for (int64_t m = b; m < e; ++m) {
        const int64_t idx = static_cast<int64_t>(pi[m]);
        T* dst = po + m * dim;
        if (idx < 0 || idx >= rows) {
          std::fill(dst, dst + dim, convert<T>(0.0));
        } else if (s1 == 1) {
          std::copy(pw + idx * s0, pw + idx * s0 + dim, dst);
        } else {
          for (int64_t d = 0; d < dim; ++d) dst[d] = pw[idx * s0 + d * s1];
        }
      }
    });
  });
}

void embedding_backward(const Tensor& dweight, const Tensor& grad, const Tensor& indices) {
  dispatch_floating_index(grad.dtype(), indices.dtype(), "embedding", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    using A = acc_t<T>;
    const T* pg = grad.data_ptr<T>();
    const I* pi = indices.data_ptr<I>();
    A* pd = dweight.data_ptr<A>();
    const int64_t rows = dweight.shape()[0], dim = dweight.shape()[1], count = indices.numel();
    parallel_for(0, dim, std::max<int64_t>(16, kParallelGrain / std::max<int64_t>(count, 1)),
                 [&](int64_t b, int64_t e) {
      for (int64_t m = 0; m < count; ++m) {
        const int64_t idx = static_cast<int64_t>(pi[m]);
        if (idx < 0 || idx >= rows) continue;
        A* dst = pd + idx * dim;
        const T* src = pg + m * dim;
        for (int64_t d = b; d < e; ++d) dst[d] += convert<A>(src[d]);
      }
    });
  });
}

}  // namespace tg::cpu
