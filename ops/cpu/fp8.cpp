// ops/fp8.h on the CPU: blocks in parallel, each block's max |x| then its values divided by the
// multiplier and rounded to e4m3 (fp8_math.h, the GPU's arithmetic); dequantisation rows in parallel.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/detail/type_dispatch.h"
#include "core/parallel.h"
#include "ops/fp8_kernels.h"
#include "ops/fp8_math.h"

namespace tg::cpu {

void quantize_fp8(const Tensor& x, const Tensor& data, const Tensor& scale, const Tensor& first_bad,
                  int64_t block_rows, int64_t block_cols, bool check_finite) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  const int64_t brs = (rows + block_rows - 1) / block_rows, bcs = (cols + block_cols - 1) / block_cols;
  const int64_t s0 = scale.strides()[0], s1 = scale.strides()[1];
  uint8_t* q = data.data_ptr<uint8_t>();
  float* sc = scale.data_ptr<float>();
  std::atomic<int64_t> bad{rows * cols};
  dispatch_floating(x.dtype(), "quantize_fp8", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data_ptr<T>();
    const int64_t per_block = block_rows * block_cols;
    parallel_for(0, brs * bcs, std::max<int64_t>(1, kParallelGrain / per_block), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t br = b / bcs, bc = b % bcs;
        const int64_t r0 = br * block_rows, r1 = std::min(rows, r0 + block_rows);
        const int64_t c0 = bc * block_cols, c1 = std::min(cols, c0 + block_cols);
        float amax = 0.0f;
        int64_t first = rows * cols;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) {
            const float v = static_cast<float>(src[r * cols + c]);
            if (check_finite && !std::isfinite(v)) first = std::min(first, r * cols + c);
            amax = std::max(amax, std::fabs(v));
          }
        if (first < rows * cols) {
          int64_t seen = bad.load();
          while (first < seen && !bad.compare_exchange_weak(seen, first)) {}
          continue;
        }
        const float s = fp8::scale_of(amax);
        sc[br * s0 + bc * s1] = s;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = fp8::to_e4m3(static_cast<float>(src[r * cols + c]) / s);
      }
    });
  });
  if (check_finite) first_bad.data_ptr<int64_t>()[0] = bad.load();
}

void dequantize_fp8(const Tensor& out, const Tensor& data, const Tensor& scale, int64_t block_rows,
                    int64_t block_cols) {
  const int64_t rows = out.shape()[0], cols = out.shape()[1];
  const int64_t bcs = (cols + block_cols - 1) / block_cols;
  const uint8_t* q = data.data_ptr<uint8_t>();
  const float* sc = scale.data_ptr<float>();
  float table[256];
  for (int i = 0; i < 256; ++i) table[i] = fp8::from_e4m3(static_cast<uint8_t>(i));
  dispatch_floating(out.dtype(), "dequantize_fp8", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data_ptr<T>();
    parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, cols)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* srow = sc + (r / block_rows) * bcs;
        for (int64_t c = 0; c < cols; ++c)
          dst[r * cols + c] = static_cast<T>(static_cast<acc_t<T>>(table[q[r * cols + c]]) * srow[c / block_cols]);
      }
    });
  });
}

}  // namespace tg::cpu
