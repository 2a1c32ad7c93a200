#include "nn/init.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/primitives.h"
#include "ops/shape.h"
#include "ops/unary.h"

namespace tg::nn::init {
namespace {

struct SkipState {
  const SkipInitGuard* guard = nullptr;
  TensorOptions options;
  bool defer_linear_weights = false;
};
thread_local SkipState skip_state;

// The pieces of a draw already reserved are no new draws: a draw observer (activation
// checkpointing) saw the reserve, and is not told of the generators that fill it piece by piece.
class PiecesUnobserved {
 public:
  PiecesUnobserved() : saved_(tg::detail::draw_observer) { tg::detail::draw_observer = nullptr; }
  ~PiecesUnobserved() { tg::detail::draw_observer = saved_; }

 private:
  tg::detail::DrawObserver* saved_;
};

// Generator of `seed` at counter `offset`.
Generator at(uint64_t seed, uint64_t offset) {
  Generator g(seed);
  g.set_state(seed, offset);
  return g;
}

// Fills t with the float64 values block(b, n) gives for its elements [b, b + n) (row-major; b a
// multiple of 4, so a block starts on a Philox counter), each rounded once into t. On the CPU the
// blocks are filled in parallel and are small enough that their float64 passes (draw, scale,
// round) stay in a core's cache; elsewhere they go one by one.
template <class F>
void fill_in_blocks(const Tensor& t, F&& block) {
  constexpr int64_t kBlock = 1 << 16;
  const int64_t n = t.numel();
  PiecesUnobserved unobserved;
  if (!t.is_contiguous()) return copy_(t, view(block(0, n), t.shape()));
  auto part = [&](int64_t b) { return t.as_strided({std::min(kBlock, n - b)}, {1}, t.storage_offset() + b); };
  if (!t.device().is_cpu()) {
    for (int64_t b = 0; b < n; b += kBlock) copy_(part(b), block(b, std::min(kBlock, n - b)));
    return;
  }
  tg::detail::check_writable("init", t);
  t.bump_version();  // once: the blocks write t's storage from several threads
  parallel_for(0, (n + kBlock - 1) / kBlock, 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k)
      tg::detail::cpu_copy(part(k * kBlock), block(k * kBlock, std::min(kBlock, n - k * kBlock)));
  });
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

TensorOptions parameter_options() { return skipping() ? skip_state.options : TensorOptions{}; }

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  if (skipping()) return;
  NoGradGuard g;
  // Drawn and scaled in float64 on the host, rounded once into t: the values of one randn of t's
  // shape from gen, a block at a time.
  const uint64_t seed = gen.seed(), first = gen.reserve(static_cast<uint64_t>((t.numel() + 3) / 4));
  fill_in_blocks(t, [&](int64_t b, int64_t n) {
    Generator piece = at(seed, first + static_cast<uint64_t>(b / 4));
    return add(mul(randn({n}, piece, {kFloat64, Device::cpu()}), std), mean);
  });
}

void uniform_(const Tensor& t, double low, double high, Generator& gen) {
  if (skipping()) return;
  NoGradGuard g;
  TG_CHECK(low < high, "uniform_", "wants low < high, got ", low, " and ", high);
  const uint64_t seed = gen.seed(), first = gen.reserve(static_cast<uint64_t>((t.numel() + 3) / 4));
  fill_in_blocks(t, [&](int64_t b, int64_t n) {
    Generator piece = at(seed, first + static_cast<uint64_t>(b / 4));
    return uniform({n}, low, high, piece, {kFloat64, Device::cpu()});
  });
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
