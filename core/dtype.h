// Element types. Floating tensors compute in float32 (float64 on the CPU for gradient checks);
// bfloat16 is a storage format whose values are widened to float32 in registers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "core/bfloat16.h"

namespace tg {

// UInt8 holds raw bytes (bitsandbytes' packed 4-bit weights), never arithmetic.
enum class DType : uint8_t { Float32, BFloat16, Float64, Int32, Int64, Bool, UInt8 };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;

size_t element_size(DType t);
const char* dtype_name(DType t);
inline bool is_floating_point(DType t) {
  return t == kFloat32 || t == kBFloat16 || t == kFloat64;
}
inline bool is_integral(DType t) { return t == kInt32 || t == kInt64 || t == kBool || t == kUInt8; }
// Whether a double converts to `t` without undefined behaviour: inside int32's / int64's range
// (truncated), any value for the floating types and bool. NaN fits only a floating type or bool.
inline bool fits_dtype(double v, DType t) {
  if (t == kInt32) return v > -2147483649.0 && v < 2147483648.0;
  if (t == kInt64) return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
  return true;
}
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return kFloat32;
  else if constexpr (std::is_same_v<T, bf16>) return kBFloat16;
  else if constexpr (std::is_same_v<T, double>) return kFloat64;
  else if constexpr (std::is_same_v<T, int32_t>) return kInt32;
  else if constexpr (std::is_same_v<T, int64_t>) return kInt64;
  else if constexpr (std::is_same_v<T, bool>) return kBool;
  else if constexpr (std::is_same_v<T, uint8_t>) return kUInt8;
  else static_assert(sizeof(T) == 0, "tapegrad has no dtype for this C++ type");
}

// The type arithmetic happens in: float for float32/bfloat16, double for float64.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

}  // namespace tg
