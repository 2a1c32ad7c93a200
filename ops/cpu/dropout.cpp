// CPU dropout: one strided pass (read x, write out); one Philox block per four elements.
#include "core/detail/strided_loop.h"
#include "core/detail/type_dispatch.h"
#include "ops/dropout_kernels.h"

namespace tg::cpu {

void dropout(const Tensor& out, const Tensor& x, uint64_t seed, uint64_t first_counter, float p, double scale) {
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    T* po = out.data_ptr<T>();
    const T* px = x.data_ptr<T>();
    const A s = static_cast<A>(scale);
    // out is contiguous, so its offset o[0] + j is the element's row-major index i.
    strided_loop<2>(out.shape(), {out.strides(), x.strides()}, [&](int64_t n, auto o, auto k) {
      uint64_t block = ~uint64_t{0};
      unsigned keep = 0;
      for (int64_t j = 0; j < n; ++j) {
        const uint64_t i = static_cast<uint64_t>(o[0] + j);
        if (i / 4 != block) block = i / 4, keep = dropout_keep4(seed, first_counter, block, p);
        po[i] = (keep >> (i % 4)) & 1u ? convert<T>(convert<A>(px[o[1] + j * k[1]]) * s) : convert<T>(0.0);
      }
    });
  });
}

}  // namespace tg::cpu
