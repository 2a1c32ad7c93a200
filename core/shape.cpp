#include "core/shape.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace tg {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    TG_CHECK(s >= 0, "shape", "negative size in shape ", shape);
    TG_CHECK(!__builtin_mul_overflow(n, s, &n), "shape", "shape ", shape, " has more than 2^63 elements");
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // The extent ignoring zero dims must fit too: a view's offsets are computed from it.
    TG_CHECK(shape[i] >= 0 && !__builtin_mul_overflow(s, std::max<int64_t>(shape[i], 1), &s), "shape", "shape ",
             shape, " is too large: its strides overflow int64");
  }
  return strides;
}

size_t nbytes_of(const Shape& shape, size_t element_size) {
  size_t n = 0;
  TG_CHECK(!__builtin_mul_overflow(static_cast<size_t>(numel_of(shape)), element_size, &n) &&
               n <= static_cast<size_t>(INT64_MAX),
           "shape", "shape ", shape, " of ", element_size, "-byte elements needs more than 2^63 bytes");
  return n;
}

std::string shape_str(const Shape& shape) { return detail::to_text(shape); }

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  TG_CHECK(dim >= lo && dim <= hi, op, "dim ", dim, " is out of range for a tensor of ", ndim,
           " dims (wants ", lo, "..", hi, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TG_CHECK(da == db || da == 1 || db == 1, op, "shapes ", a, " and ", b,
             " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tg
