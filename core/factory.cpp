#include "core/factory.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/autograd.h"
#include "core/parallel.h"
#include "core/detail/philox.h"
#include "core/primitives.h"

namespace tg {

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

namespace {

// Builds a host float64 tensor, `per` elements at a time: f(c, out) writes elements
// [c * per, c * per + per) (the last block is cut to the tensor); then converts and moves it to
// opts. Each block is a pure function of c, so the blocks are filled in parallel.
template <int per, class F>
Tensor generate_blocks(const Shape& shape, TensorOptions opts, F&& f) {
  Tensor host = Tensor::empty(shape, {kFloat64, Device::cpu()});
  double* p = host.data_ptr<double>();
  const int64_t n = host.numel();
  parallel_for(0, (n + per - 1) / per, kParallelGrain / per, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      if ((c + 1) * per <= n) {
        f(c, p + c * per);
      } else {
        double last[per];
        f(c, last);
        std::copy(last, last + (n - c * per), p + c * per);
      }
    }
  });
  Tensor out = Tensor::empty(shape, {opts.dtype, opts.device});
  copy_(out, host);
  if (opts.requires_grad) out.requires_grad_(true);
  return out;
}

// By f(i) for each element i.
template <class F>
Tensor generate(const Shape& shape, TensorOptions opts, F&& f) {
  return generate_blocks<1>(shape, opts, [&](int64_t i, double* out) { *out = f(i); });
}

}  // namespace

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  Tensor t = Tensor::empty(shape, {opts.dtype, opts.device});
  fill_(t, value);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor arange(double start, double end, double step, TensorOptions opts) {
  TG_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end), "arange",
           "wants finite bounds and a non-zero step, got start ", start, " end ", end, " step ", step);
  const double count = std::ceil((end - start) / step);
  TG_CHECK(count < 9.2e18, "arange", "start ", start, " end ", end, " step ", step, " give ", count,
           " elements, more than a tensor can hold");  // also before the cast to int64, which would be undefined
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  TG_CHECK(n == 0 || (fits_dtype(start, opts.dtype) && fits_dtype(start + static_cast<double>(n - 1) * step, opts.dtype)),
           "arange", "values from ", start, " to ", end, " do not fit dtype ", opts.dtype);
  return generate({n}, opts, [&](int64_t i) { return start + static_cast<double>(i) * step; });
}

Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts) {
  // Counter c gives 4 words: two Box-Muller pairs, so normals 4c .. 4c + 3 (cos, sin, cos, sin).
  const uint64_t seed = gen.seed(), first = gen.reserve(static_cast<uint64_t>((numel_of(shape) + 3) / 4));
  return generate_blocks<4>(shape, opts, [&](int64_t c, double* out) {
    Philox4 r = philox(seed, first + static_cast<uint64_t>(c));
    for (int pair = 0; pair < 2; ++pair) {
      double u1 = (static_cast<double>(r.v[2 * pair] >> 8) + 1.0) / 16777216.0;  // (0, 1]
      double u2 = static_cast<double>(r.v[2 * pair + 1] >> 8) / 16777216.0;
      double radius = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * std::numbers::pi * u2;
      out[2 * pair] = radius * std::cos(angle);
      out[2 * pair + 1] = radius * std::sin(angle);
    }
  });
}

Tensor uniform(const Shape& shape, double low, double high, Generator& gen, TensorOptions opts) {
  TG_CHECK(low < high, "uniform", "wants low < high, got ", low, " and ", high);
  const uint64_t seed = gen.seed(), first = gen.reserve(static_cast<uint64_t>((numel_of(shape) + 3) / 4));
  return generate_blocks<4>(shape, opts, [&](int64_t c, double* out) {
    Philox4 r = philox(seed, first + static_cast<uint64_t>(c));
    for (int k = 0; k < 4; ++k) out[k] = low + (high - low) * static_cast<double>(uniform01(r.v[k]));
  });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, TensorOptions opts) {
  TG_CHECK(low < high, "randint", "wants low < high, got ", low, " and ", high);
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);  // high - low overflows int64
  const uint64_t seed = gen.seed(), first = gen.reserve(static_cast<uint64_t>((numel_of(shape) + 1) / 2));
  return generate(shape, opts, [&](int64_t i) {
    Philox4 r = philox(seed, first + static_cast<uint64_t>(i / 2));
    int lane = 2 * static_cast<int>(i % 2);
    uint64_t u = (static_cast<uint64_t>(r.v[lane]) << 32) | r.v[lane + 1];
    return static_cast<double>(static_cast<int64_t>(static_cast<uint64_t>(low) + u % range));
  });
}

template <class T>
Tensor from_vector(const std::vector<T>& values, Shape shape, Device device, bool requires_grad) {
  if (shape.empty() && values.size() != 1) shape = {static_cast<int64_t>(values.size())};
  TG_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "from_vector", "got ",
           values.size(), " values for shape ", shape, " (", numel_of(shape), " elements)");
  Tensor host = Tensor::empty(shape, {dtype_of<T>(), Device::cpu()});
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < values.size(); ++i) host.data_ptr<bool>()[i] = values[i];
  } else {
    if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  }
  Tensor out = host;
  if (!device.is_cpu()) {
    out = Tensor::empty(shape, {dtype_of<T>(), device});
    copy_(out, host);
  }
  if (requires_grad) out.requires_grad_(true);
  return out;
}

template Tensor from_vector(const std::vector<float>&, Shape, Device, bool);
template Tensor from_vector(const std::vector<double>&, Shape, Device, bool);
template Tensor from_vector(const std::vector<int32_t>&, Shape, Device, bool);
template Tensor from_vector(const std::vector<int64_t>&, Shape, Device, bool);
template Tensor from_vector(const std::vector<bool>&, Shape, Device, bool);

Tensor scalar_tensor(double value, TensorOptions opts) { return full({}, value, opts); }

}  // namespace tg
