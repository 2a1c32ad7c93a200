// Calls a generic lambda with the C++ element type of a runtime dtype:
//   dispatch_floating(t.dtype(), "exp", [&](auto tag) { using T = typename decltype(tag)::type; ... });
#pragma once

#include <cstdint>
#include "core/dtype.h"
#include "core/error.h"

namespace tg {

template <class T>
struct type_tag {
  using type = T;
};

template <class F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case kFloat32: return f(type_tag<float>{});
    case kBFloat16: return f(type_tag<bf16>{});
    case kFloat64: return f(type_tag<double>{});
    default: fail(op, "wants a floating-point tensor (float32, bfloat16 or float64), got ", t);
  }
}

template <class F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  switch (t) {
    case kInt32: return f(type_tag<int32_t>{});
    case kInt64: return f(type_tag<int64_t>{});
    case kBool: return f(type_tag<bool>{});
    case kUInt8: return f(type_tag<uint8_t>{});
    default: return dispatch_floating(t, op, std::forward<F>(f));
  }
}

template <class F>
decltype(auto) dispatch_index(DType t, const char* op, F&& f) {
  switch (t) {
    case kInt32: return f(type_tag<int32_t>{});
    case kInt64: return f(type_tag<int64_t>{});
    default: fail(op, "wants an integer index tensor (int32 or int64), got ", t);
  }
}

// f(type_tag<T>{}, type_tag<I>{}) for a floating-point value dtype and an index dtype (lookups
// and losses by target).
template <class F>
void dispatch_floating_index(DType value, DType index, const char* op, F&& f) {
  dispatch_floating(value, op, [&](auto tag) { dispatch_index(index, op, [&](auto itag) { f(tag, itag); }); });
}

// Value conversions that also handle bf16 (which only converts through float).
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else if constexpr (std::is_same_v<From, bf16>) return static_cast<To>(static_cast<float>(v));
  else if constexpr (std::is_same_v<To, bf16>) return bf16(static_cast<float>(v));
  else return static_cast<To>(v);
}

}  // namespace tg
