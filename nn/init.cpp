#include "nn/init.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numbers>

#include "core/autograd.h"
#include "core/parallel.h"
#include "core/detail/philox.h"
#include "core/primitives.h"
#include "core/detail/type_dispatch.h"

namespace tg::nn::init {
namespace {

struct SkipState {
  const SkipInitGuard* guard = nullptr;
  TensorOptions options;
  bool defer_linear_weights = false;
};
thread_local SkipState skip_state;

thread_local const ReserveDrawsGuard* reserve_guard = nullptr;

// Philox counter c's 4 values, element 4c + k in lane k.
using FourValues = void (*)(const Philox4& r, const double* params, double out[4]);

// Box-Muller on the counter's two pairs of words, scaled: randn's stream (core/factory.cpp) times
// params[0] plus params[1], rounded as mul then add round.
void normal_four(const Philox4& r, const double* params, double out[4]) {
  for (int pair = 0; pair < 2; ++pair) {
    const double u1 = (static_cast<double>(r.v[2 * pair] >> 8) + 1.0) / 16777216.0;  // (0, 1]
    const double u2 = static_cast<double>(r.v[2 * pair + 1] >> 8) / 16777216.0;
    const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * std::numbers::pi * u2;
    out[2 * pair] = radius * std::cos(angle) * params[0] + params[1];
    out[2 * pair + 1] = radius * std::sin(angle) * params[0] + params[1];
  }
}

// uniform's stream: low + (high - low) * u, params {low, high}.
void uniform_four(const Philox4& r, const double* params, double out[4]) {
  for (int k = 0; k < 4; ++k) out[k] = params[0] + (params[1] - params[0]) * static_cast<double>(uniform01(r.v[k]));
}

// Elements [begin, begin + n) of the stream (begin a multiple of 4) rounded into p[0, n), by
// the pool's threads: each value computed in float64 and rounded once, straight into place.
template <class T>
void fill_host(T* p, int64_t begin, int64_t n, uint64_t seed, uint64_t first, FourValues four, const double* params) {
  parallel_for(0, (n + 3) / 4, kParallelGrain / 4, [&](int64_t c0, int64_t c1) {
    double v[4];
    for (int64_t c = c0; c < c1; ++c) {
      four(philox(seed, first + static_cast<uint64_t>((begin / 4) + c)), params, v);
      const int64_t at = 4 * c, len = std::min<int64_t>(4, n - at);
      for (int64_t k = 0; k < len; ++k) p[at + k] = convert<T>(v[k]);
    }
  });
}

void fill_host(const Tensor& t, int64_t begin, uint64_t seed, uint64_t first, FourValues four, const double* params) {
  dispatch_floating(t.dtype(), "init", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_host(t.data_ptr<T>(), begin, t.numel(), seed, first, four, params);
  });
}

// Fills t (row-major) with the stream of counters first, first + 1, ... of seed. In place on
// the host; elsewhere (another device, strides) through host tensors of t's dtype, on a device
// in chunks so the host holds a chunk, not the tensor.
void fill_stream(const Tensor& t, Generator& gen, FourValues four, std::initializer_list<double> params) {
  const int64_t n = t.numel();
  const uint64_t seed = gen.seed(), first = gen.reserve(static_cast<uint64_t>((n + 3) / 4));
  if (n == 0) return;
  const TensorOptions host{t.dtype(), Device::cpu()};
  if (!t.is_contiguous()) {
    const Tensor h = Tensor::empty(t.shape(), host);
    fill_host(h, 0, seed, first, four, params.begin());
    return copy_(t, h);
  }
  if (t.device().is_cpu()) {
    tg::detail::check_writable("init", t);
    t.bump_version();  // once: the threads write t's storage directly
    return fill_host(t, 0, seed, first, four, params.begin());
  }
  constexpr int64_t kChunk = 1 << 24;
  for (int64_t b = 0; b < n; b += kChunk) {
    const Tensor h = Tensor::empty({std::min(kChunk, n - b)}, host);
    fill_host(h, b, seed, first, four, params.begin());
    copy_(t.as_strided({h.numel()}, {1}, t.storage_offset() + b), h);
  }
}

}  // namespace

SkipInitGuard::SkipInitGuard(TensorOptions o, bool defer_linear_weights) : outer_(skip_state.guard) {
  TG_CHECK(is_floating_point(o.dtype), "SkipInitGuard", "parameters are floating point, got ", o.dtype);
  TG_CHECK(!outer_, "SkipInitGuard", "is already active on this thread");
  skip_state = {this, {o.dtype, o.device, false}, defer_linear_weights};
}

SkipInitGuard::~SkipInitGuard() { skip_state = {}; }

bool skipping() { return skip_state.guard != nullptr; }

bool deferring_linear_weights() { return skip_state.defer_linear_weights; }

Tensor unallocated(const Shape& shape, TensorOptions options) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(0, options.device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype;
  return Tensor(std::move(impl));
}

bool is_unallocated(const Tensor& t) { return t.defined() && t.numel() > 0 && t.storage()->nbytes() == 0; }

void allocate_unallocated(const Tensor& t) {
  TG_CHECK(is_unallocated(t), "allocate_unallocated", "the tensor already has its memory");
  t.impl().storage = std::make_shared<Storage>(t.nbytes(), t.device());
  t.impl().offset = 0;
}

void deallocate(const Tensor& t) {
  t.impl().storage = std::make_shared<Storage>(0, t.device());
  t.impl().offset = 0;
}

TensorOptions parameter_options() { return skipping() ? skip_state.options : TensorOptions{}; }

ReserveDrawsGuard::ReserveDrawsGuard() : outer_(reserve_guard) { reserve_guard = this; }
ReserveDrawsGuard::~ReserveDrawsGuard() { reserve_guard = outer_; }

void reserve_draw(const Tensor& t, Generator& gen) { gen.reserve(static_cast<uint64_t>((t.numel() + 3) / 4)); }

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  if (skipping()) return;
  if (reserve_guard) return reserve_draw(t, gen);
  NoGradGuard g;
  // The values of one randn of t's shape from gen, scaled in float64 and rounded once into t.
  fill_stream(t, gen, normal_four, {std, mean});
}

void uniform_(const Tensor& t, double low, double high, Generator& gen) {
  if (skipping()) return;
  TG_CHECK(low < high, "uniform_", "wants low < high, got ", low, " and ", high);
  if (reserve_guard) return reserve_draw(t, gen);
  NoGradGuard g;
  fill_stream(t, gen, uniform_four, {low, high});
}

void constant_(const Tensor& t, double value) {
  if (skipping()) return;
  NoGradGuard g;
  fill_(t, value);
}
void zeros_(const Tensor& t) { constant_(t, 0.0); }
void ones_(const Tensor& t) { constant_(t, 1.0); }

int64_t fan_in(const Tensor& t) {
  TG_CHECK(t.dim() >= 2, "kaiming_uniform_", "fan_in needs a tensor of at least 2 dims, got ", t.shape());
  int64_t f = t.shape()[1];
  for (int64_t d = 2; d < t.dim(); ++d) f *= t.shape()[d];
  return f;
}

void kaiming_uniform_(const Tensor& t, double a, Generator& gen) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in(t)));
  uniform_(t, -bound, bound, gen);
}

}  // namespace tg::nn::init
