// GGUF's tensor types: sizes, and float32 to and from F32, F16, BF16 and Q8_0.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/bfloat16.h"
#include "core/error.h"
#include "io/detail/float16.h"
#include "io/gguf.h"

namespace tg::gguf {
namespace {

struct TypeInfo {
  TensorType type;
  const char* name;
  int64_t block, bytes;
};
constexpr TypeInfo kTypes[] = {
    {TensorType::kF32, "F32", 1, 4},       {TensorType::kF16, "F16", 1, 2},
    {TensorType::kBF16, "BF16", 1, 2},     {TensorType::kQ8_0, "Q8_0", 32, 34},
    {TensorType::kQ4_0, "Q4_0", 32, 18},   {TensorType::kQ4_K, "Q4_K", 256, 144},
    {TensorType::kQ6_K, "Q6_K", 256, 210},
};

const TypeInfo& info_of(TensorType type) {
  for (const TypeInfo& t : kTypes)
    if (t.type == type) return t;
  fail("gguf", "tensor type ", static_cast<uint32_t>(type), " is not one tapegrad reads (",
       "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)");
}

constexpr int64_t kQ8Block = 32;

void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

void check_codec(TensorType type, const char* what) {
  TG_CHECK(type == TensorType::kF32 || type == TensorType::kF16 || type == TensorType::kBF16 ||
               type == TensorType::kQ8_0,
           "gguf", what, " ", type_name(type), ": tapegrad encodes and decodes F32, F16, BF16 and Q8_0");
}

}  // namespace

const char* type_name(TensorType type) {
  for (const TypeInfo& t : kTypes)
    if (t.type == type) return t.name;
  return "unknown";
}
int64_t block_size(TensorType type) { return info_of(type).block; }
int64_t block_bytes(TensorType type) { return info_of(type).bytes; }

uint64_t row_bytes(TensorType type, int64_t n) {
  const TypeInfo& t = info_of(type);
  TG_CHECK(n >= 0 && n % t.block == 0, "gguf", "a row of ", n, " values is not whole ", t.name, " blocks of ",
           t.block);
  return static_cast<uint64_t>(n / t.block) * static_cast<uint64_t>(t.bytes);
}

void encode(TensorType type, const float* src, int64_t n, uint8_t* dst) {
  check_codec(type, "encode");
  row_bytes(type, n);
  switch (type) {
    case TensorType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); break;
    case TensorType::kF16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, io::detail::float_to_half(src[i]));
      break;
    case TensorType::kBF16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, bf16(src[i]).bits);
      break;
    default:  // Q8_0
      for (int64_t b = 0; b < n / kQ8Block; ++b, src += kQ8Block, dst += 34) {
        float amax = 0;
        for (int64_t j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(src[j]));
        // NaN passes max unseen; an infinity would make every other value 0. Both are a broken model.
        for (int64_t j = 0; j < kQ8Block; ++j)
          TG_CHECK(std::isfinite(src[j]), "gguf", "Q8_0 cannot encode ", src[j], " (value ", b * kQ8Block + j, ")");
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;  // multiplied, not divided: ggml's rounding
        store_u16(dst, io::detail::float_to_half(d));
        for (int64_t j = 0; j < kQ8Block; ++j)
          dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(src[j] * id)));
      }
  }
}

void decode(TensorType type, const uint8_t* src, int64_t n, float* dst) {
  check_codec(type, "decode");
  row_bytes(type, n);
  switch (type) {
    case TensorType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); break;
    case TensorType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = io::detail::half_to_float(load_u16(src + 2 * i));
      break;
    case TensorType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(load_u16(src + 2 * i)) << 16;
        std::memcpy(dst + i, &bits, 4);
      }
      break;
    default:  // Q8_0
      for (int64_t b = 0; b < n / kQ8Block; ++b, src += 34, dst += kQ8Block) {
        const float d = io::detail::half_to_float(load_u16(src));
        for (int64_t j = 0; j < kQ8Block; ++j) dst[j] = d * static_cast<float>(static_cast<int8_t>(src[2 + j]));
      }
  }
}

}  // namespace tg::gguf
