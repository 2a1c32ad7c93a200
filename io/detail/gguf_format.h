// What the GGUF writer and reader share (internal to io/).
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/gguf.h"

namespace tg::gguf::detail {

// Bytes of a number or bool in the file.
inline size_t scalar_bytes(ValueType t) {
  switch (t) {
    case ValueType::kUInt8: case ValueType::kInt8: case ValueType::kBool: return 1;
    case ValueType::kUInt16: case ValueType::kInt16: return 2;
    case ValueType::kUInt32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
    default: return 8;
  }
}

inline uint64_t padded(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace tg::gguf::detail
