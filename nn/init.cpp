#include "nn/init.h"

#include <cmath>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "ops/unary.h"

namespace tg::nn::init {
namespace {

struct SkipState {
  const SkipInitGuard* guard = nullptr;
  TensorOptions options;
};
thread_local SkipState skip_state;

}  // namespace

SkipInitGuard::SkipInitGuard(TensorOptions o) : outer_(skip_state.guard) {
  TG_CHECK(is_floating_point(o.dtype), "SkipInitGuard", "parameters are floating point, got ", o.dtype);
  TG_CHECK(!outer_, "SkipInitGuard", "is already active on this thread");
  skip_state = {this, {o.dtype, o.device, false}};
}

SkipInitGuard::~SkipInitGuard() { skip_state = {}; }

bool skipping() { return skip_state.guard != nullptr; }

TensorOptions parameter_options() { return skipping() ? skip_state.options : TensorOptions{}; }

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  if (skipping()) return;
  NoGradGuard g;
  // Drawn and scaled in float64 on the host, rounded once into t.
  Tensor r = randn(t.shape(), gen, {kFloat64, Device::cpu()});
  copy_(t, add(mul(r, std), mean));
}

void uniform_(const Tensor& t, double low, double high, Generator& gen) {
  if (skipping()) return;
  NoGradGuard g;
  copy_(t, uniform(t.shape(), low, high, gen, {kFloat64, Device::cpu()}));
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
