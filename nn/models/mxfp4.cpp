#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/bfloat16.h"
#include "core/parallel.h"
#include "nn/models/detail/mxfp4.h"

namespace tg::nn::detail {

const float kFp4Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

Tensor dequantize_mxfp4(const Tensor& blocks, const Tensor& scales, const std::string& name) {
  TG_CHECK(blocks.dtype() == kUInt8 && scales.dtype() == kUInt8 && blocks.dim() == 4 && blocks.shape()[3] == 16 &&
               scales.dim() == 3 && Shape(blocks.shape().begin(), blocks.shape().end() - 1) == scales.shape(),
           "from_pretrained", "'", name, "_blocks' ", blocks.shape(), " and '", name, "_scales' ", scales.shape(),
           " are not MXFP4 (uint8 [E, R, G, 16] and [E, R, G])");
  const int64_t E = blocks.shape()[0], R = blocks.shape()[1], G = blocks.shape()[2], C = G * 32;
  Tensor out = Tensor::empty({E, C, R}, {kBFloat16, Device::cpu()});
  const uint8_t* pb = blocks.data_ptr<uint8_t>();
  const uint8_t* ps = scales.data_ptr<uint8_t>();
  bf16* po = out.data_ptr<bf16>();
  parallel_for(0, E * R, std::max<int64_t>(1, kParallelGrain / C), [&](int64_t lo, int64_t hi) {
    for (int64_t er = lo; er < hi; ++er) {
      const int64_t e = er / R, r = er % R;
      for (int64_t g = 0; g < G; ++g) {
        // as torch.ldexp: the FP4 value times 2^(s - 127) in float32, rounded to bfloat16
        const float scale = std::ldexp(1.0f, static_cast<int>(ps[er * G + g]) - 127);
        const uint8_t* bytes = pb + (er * G + g) * 16;
        for (int64_t b = 0; b < 16; ++b) {
          const int64_t c = g * 32 + 2 * b;
          po[(e * C + c) * R + r] = bf16(kFp4Values[bytes[b] & 0x0F] * scale);
          po[(e * C + c + 1) * R + r] = bf16(kFp4Values[bytes[b] >> 4] * scale);
        }
      }
    }
  });
  return out;
}

}  // namespace tg::nn::detail
