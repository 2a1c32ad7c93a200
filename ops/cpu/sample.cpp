// CPU sample_categorical: one pass over each row (read each score once, one Philox block per four).
#include "core/detail/type_dispatch.h"
#include "ops/sample_kernels.h"

namespace tg::cpu {

void sample_categorical(const Tensor& out, const Tensor& logits, float temperature, uint64_t seed,
                        uint64_t first_row) {
  dispatch_floating(logits.dtype(), "sample_categorical", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t B = logits.shape()[0], V = logits.shape()[1];
    int64_t* po = out.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      const T* row = logits.data_ptr<T>() + b * V;
      float best = -INFINITY;
      int64_t arg = kSampleNotFinite;
      bool nan = false;
      float g[4];
      for (int64_t j = 0; j < V; ++j) {
        if (j % 4 == 0) gumbel4(seed, first_row + static_cast<uint64_t>(b), static_cast<uint64_t>(j / 4), g);
        const float s = convert<float>(row[j]);
        nan = nan || std::isnan(s);
        const float key = s / temperature + g[j % 4];
        if (key > best) best = key, arg = j;
      }
      po[b] = nan ? kSampleNan : std::isfinite(best) ? arg : kSampleNotFinite;
    }
  });
}

}  // namespace tg::cpu
