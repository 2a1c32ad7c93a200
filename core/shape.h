// Shapes and strides are plain vectors of int64 (row-major strides in elements).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

using Shape = std::vector<int64_t>;

// Size arithmetic is checked: a negative size, or an element count, stride or byte count that
// overflows, is a tg::Error (a shape read from a file can be anything).
int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
size_t nbytes_of(const Shape& shape, size_t element_size);
std::string shape_str(const Shape& shape);
// Normalises a possibly negative dim against `ndim`; throws naming `op` when out of range.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);
// NumPy broadcasting of two shapes; throws naming `op` when they do not broadcast.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

}  // namespace tg
