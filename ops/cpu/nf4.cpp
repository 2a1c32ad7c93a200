// ops/nf4.h on the CPU: bitsandbytes' kQuantizeBlockwise / kDequantizeBlockwise in loops. Values
// are scaled as there, x * (1 / absmax) in float32 (so an all-zero block gives NaN and code 0).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/detail/type_dispatch.h"
#include "ops/nf4_kernels.h"
#include "ops/nf4_math.h"

namespace tg::cpu {
namespace {

// Max |x| of each block; refuses a NaN or inf (it would poison its block's scale silently).
template <class T>
std::vector<float> block_absmax(const T* x, int64_t n, int64_t blocksize, const char* op) {
  std::vector<float> out((n + blocksize - 1) / blocksize, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(x[i]);
    TG_CHECK(std::isfinite(v), op, "'weight' holds ", v, " at element ", i, " (flattened); only finite weights "
             "can be quantised");
    out[i / blocksize] = std::max(out[i / blocksize], std::fabs(v));
  }
  return out;
}

}  // namespace

void quantize_4bit(const Tensor& x, const Tensor& packed, const Tensor& absmax, int64_t blocksize, bool fp4) {
  dispatch_floating(x.dtype(), "quantize_4bit", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data_ptr<T>();
    const int64_t n = x.numel();
    const std::vector<float> am = block_absmax(src, n, blocksize, "quantize_4bit");
    std::copy(am.begin(), am.end(), absmax.data_ptr<float>());
    uint8_t* out = packed.data_ptr<uint8_t>();
    for (int64_t i = 0; i < n; i += 2) {
      const float inv = 1.0f / am[i / blocksize];  // blocksize is even: both values share it
      const float a = static_cast<float>(src[i]) * inv;
      const float b = (i + 1 < n ? static_cast<float>(src[i + 1]) : 0.0f) * inv;
      out[i / 2] = fp4 ? static_cast<uint8_t>(nf4::quantize_fp4(a) << 4 | nf4::quantize_fp4(b))
                       : static_cast<uint8_t>(nf4::quantize_nf4(a) << 4 | nf4::quantize_nf4(b));
    }
  });
}

void quantize_8bit_blockwise(const Tensor& x, const Tensor& code, const Tensor& q, const Tensor& absmax,
                             int64_t blocksize) {
  const float* src = x.data_ptr<float>();
  const float* c = code.data_ptr<float>();
  const int64_t n = x.numel();
  const std::vector<float> am = block_absmax(src, n, blocksize, "quantize_4bit (double quant)");
  std::copy(am.begin(), am.end(), absmax.data_ptr<float>());
  uint8_t* out = q.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) out[i] = nf4::quantize_8bit(c, src[i] * (1.0f / am[i / blocksize]));
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
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t nibble = i % 2 == 0 ? src[i / 2] >> 4 : src[i / 2] & 0x0F;
      dst[i] = convert<T>(map[nibble] * scale[i / blocksize]);
    }
  });
}

}  // namespace tg::cpu
