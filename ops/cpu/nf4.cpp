// ops/nf4.h on the CPU: bitsandbytes' kQuantizeBlockwise / kDequantizeBlockwise in loops, the
// quantisation over blocks in parallel (from_pretrained quantises a whole model with it). Values
// are scaled as there, x * (1 / absmax) in float32 (so an all-zero block gives NaN and code 0).
#include <algorithm>
#include <bit>
#include <cmath>
#include <mutex>

#include "core/error.h"
#include "core/detail/type_dispatch.h"
#include "core/parallel.h"
#include "ops/nf4_kernels.h"
#include "ops/nf4_math.h"

namespace tg::cpu {
namespace {

// Calls f(first, last) for each block [first, last) of [0, n), the blocks split over threads.
template <class F>
void for_each_block(int64_t n, int64_t blocksize, F&& f) {
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  parallel_for(0, blocks, std::max<int64_t>(1, kParallelGrain / blocksize), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) f(b, b * blocksize, std::min(n, (b + 1) * blocksize));
  });
}

}  // namespace

namespace {

// One block: its absmax, and its codes packed two a byte; false (nothing written) when it holds a
// NaN or inf. Loops that vectorise: max |x| as the max of the bit patterns without the sign (the
// order of finite floats' magnitudes), the codes into a buffer (quantize_code has no branch for
// NF4), then the packing.
template <class T, bool FP4>
bool quantize_block(const T* src, int64_t len, float& absmax, uint8_t* out, bool odd_tail) {
  uint32_t top = 0;
  for (int64_t i = 0; i < len; ++i) top = std::max(top, std::bit_cast<uint32_t>(static_cast<float>(src[i])) & 0x7fffffffu);
  if (top >= 0x7f800000u) return false;  // an inf (0x7f800000) or a NaN (above)
  absmax = std::bit_cast<float>(top);
  const float inv = 1.0f / absmax;  // blocksize is even: a byte's two values share it
  const nf4::Codebook& book = FP4 ? nf4::kFP4Codebook : nf4::kNF4Codebook;
  uint8_t codes[4096 + 1];  // the largest blocksize, and the padding of an odd count
  for (int64_t i = 0; i < len; ++i) codes[i] = nf4::quantize_code(static_cast<float>(src[i]) * inv, book);
  if (odd_tail) codes[len] = nf4::quantize_code(0.0f * inv, book);
  for (int64_t i = 0; i < (len + 1) / 2; ++i) out[i] = static_cast<uint8_t>(codes[2 * i] << 4 | codes[2 * i + 1]);
  return true;
}

}  // namespace

void quantize_4bit(const Tensor& x, const Tensor& packed, const Tensor& absmax, const Tensor& first_bad,
                   int64_t blocksize, bool fp4) {
  dispatch_floating(x.dtype(), "quantize_4bit", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data_ptr<T>();
    float* am = absmax.data_ptr<float>();
    uint8_t* out = packed.data_ptr<uint8_t>();
    const int64_t n = x.numel();
    std::mutex mu;
    int64_t* bad = first_bad.data_ptr<int64_t>();
    for_each_block(n, blocksize, [&](int64_t b, int64_t first, int64_t last) {
      const bool odd_tail = last == n && n % 2 == 1;
      const bool finite = fp4 ? quantize_block<T, true>(src + first, last - first, am[b], out + first / 2, odd_tail)
                              : quantize_block<T, false>(src + first, last - first, am[b], out + first / 2, odd_tail);
      if (finite) return;
      int64_t i = first;
      while (std::isfinite(static_cast<float>(src[i]))) ++i;
      std::lock_guard<std::mutex> lock(mu);
      *bad = std::min(*bad, i);
    });
  });
}

void quantize_8bit_blockwise(const Tensor& x, const Tensor& code, const Tensor& q, const Tensor& absmax,
                             int64_t blocksize) {
  const float* src = x.data_ptr<float>();
  const float* c = code.data_ptr<float>();
  float* am = absmax.data_ptr<float>();
  uint8_t* out = q.data_ptr<uint8_t>();
  for_each_block(x.numel(), blocksize, [&](int64_t b, int64_t first, int64_t last) {
    float m = 0.0f;
    for (int64_t i = first; i < last; ++i) m = std::max(m, std::fabs(src[i]));
    am[b] = m;
    const float inv = 1.0f / m;
    for (int64_t i = first; i < last; ++i) out[i] = nf4::quantize_8bit(c, src[i] * inv);
  });
}

void dequantize_4bit(const Tensor& out, const Tensor& packed, const Tensor& absmax, const Tensor& quant_map,
                     const Tensor& nested_absmax, const Tensor& nested_quant_map, float offset, int64_t blocksize) {
  const int64_t n = out.numel(), blocks = absmax.numel();
  std::vector<float> scale(static_cast<size_t>(blocks));
  if (nested_absmax.defined()) {
    const uint8_t* qa = absmax.data_ptr<uint8_t>();
    const float* na = nested_absmax.data_ptr<float>();
    const float* code = nested_quant_map.data_ptr<float>();
    for (int64_t b = 0; b < blocks; ++b) scale[b] = code[qa[b]] * na[b / nf4::kNestedBlocksize] + offset;
  } else {
    std::copy_n(absmax.data_ptr<float>(), blocks, scale.begin());
  }
  const uint8_t* src = packed.data_ptr<uint8_t>();
  const float* map = quant_map.data_ptr<float>();
  dispatch_floating(out.dtype(), "dequantize_4bit", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data_ptr<T>();
    parallel_for(0, n, kParallelGrain, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const uint8_t nibble = i % 2 == 0 ? src[i / 2] >> 4 : src[i / 2] & 0x0F;
        dst[i] = convert<T>(map[nibble] * scale[i / blocksize]);
      }
    });
  });
}

}  // namespace tg::cpu
