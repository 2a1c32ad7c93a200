// Tensor factories, as in PyTorch. Random ones draw from an explicit Generator (or the default
// one); values are generated on the host from Philox counters and copied to the device, so a
// seed gives the same numbers on every machine and device.
#pragma once

#include <cstdint>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace tg {

inline Tensor empty(const Shape& shape, TensorOptions opts = {}) { return Tensor::empty(shape, opts); }
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
inline Tensor zeros(const Shape& shape, TensorOptions opts = {}) { return full(shape, 0.0, opts); }
inline Tensor ones(const Shape& shape, TensorOptions opts = {}) { return full(shape, 1.0, opts); }
// start, start + step, ... < end
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {.dtype = kInt64});
inline Tensor arange(int64_t end, TensorOptions opts = {.dtype = kInt64}) { return arange(0, static_cast<double>(end), 1, opts); }

// Standard normal values.
Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts = {});
// Uniform values in [low, high).
Tensor uniform(const Shape& shape, double low, double high, Generator& gen, TensorOptions opts = {});
inline Tensor rand(const Shape& shape, Generator& gen, TensorOptions opts = {}) { return uniform(shape, 0, 1, gen, opts); }
// Integers uniform in [low, high); int64 unless opts says otherwise.
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen,
               TensorOptions opts = {.dtype = kInt64});
inline Tensor randn(const Shape& shape, TensorOptions opts = {}) { return randn(shape, default_generator(), opts); }

// A tensor holding `values` (row-major) with `shape` (default: 1-D); dtype follows T.
template <class T>
Tensor from_vector(const std::vector<T>& values, Shape shape = {}, Device device = Device::cpu(),
                   bool requires_grad = false);
Tensor scalar_tensor(double value, TensorOptions opts = {});

inline Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
inline Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
inline Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
inline Tensor full_like(const Tensor& t, double v) { return full(t.shape(), v, t.options()); }

}  // namespace tg
