#include "nn/norm.h"

#include <sstream>

#include "core/factory.h"
#include "nn/init.h"
#include "ops/cast.h"
#include "ops/layer_norm.h"
#include "ops/rms_norm.h"
#include "ops/unary.h"

namespace tg::nn {
namespace {

std::string norm_repr(int64_t dim, double eps) {
  std::ostringstream os;
  os << "(" << dim << ",), eps=" << eps;
  return os.str();
}

}  // namespace

RMSNorm::RMSNorm(int64_t d, double e, bool offset) : Module("RMSNorm"), dim(d), eps(e), unit_offset(offset) {
  TG_CHECK(d > 0, "RMSNorm", "dim must be positive, got ", d);
  weight = empty({d}, init::parameter_options());
  if (offset)
    init::zeros_(weight);
  else
    init::ones_(weight);
  register_parameter("weight", weight);
}

Tensor RMSNorm::forward(const Tensor& x) {
  if (!unit_offset) return rms_norm(x, weight, eps);
  // As Gemma: (1 + w) in float32 (in bfloat16 1 + w would lose w's low bits), one rounding at the end.
  const DType wide = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  return tg::to(rms_norm(tg::to(x, wide), add(tg::to(weight, wide), 1.0), eps), x.dtype());
}

std::string RMSNorm::extra_repr() const { return norm_repr(dim, eps) + (unit_offset ? ", unit_offset=True" : ""); }

LayerNorm::LayerNorm(int64_t d, double e, bool with_bias) : Module("LayerNorm"), dim(d), eps(e) {
  TG_CHECK(d > 0, "LayerNorm", "dim must be positive, got ", d);
  weight = empty({d}, init::parameter_options());
  init::ones_(weight);
  if (with_bias) {
    bias = empty({d}, init::parameter_options());
    init::zeros_(bias);
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight, bias, eps); }

std::string LayerNorm::extra_repr() const { return norm_repr(dim, eps); }

bool is_norm(const Module& m) {
  return dynamic_cast<const RMSNorm*>(&m) != nullptr || dynamic_cast<const LayerNorm*>(&m) != nullptr;
}

}  // namespace tg::nn
