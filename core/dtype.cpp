#include "core/dtype.h"

namespace tg {

size_t element_size(DType t) {
  switch (t) {
    case kFloat32: return 4;
    case kBFloat16: return 2;
    case kFloat64: return 8;
    case kInt32: return 4;
    case kInt64: return 8;
    case kBool: return 1;
    case kUInt8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case kFloat32: return "float32";
    case kBFloat16: return "bfloat16";
    case kFloat64: return "float64";
    case kInt32: return "int32";
    case kInt64: return "int64";
    case kBool: return "bool";
    case kUInt8: return "uint8";
  }
  return "?";
}

}  // namespace tg
