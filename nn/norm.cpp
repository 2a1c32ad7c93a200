#include "nn/norm.h"

#include <sstream>

#include "core/factory.h"
#include "nn/init.h"
#include "ops/cast.h"
#include "ops/layer_norm.h"
#include "ops/rms_norm.h"
#include "ops/unary.h"

namespace tg::nn {

Norm::Norm(const char* type_name, int64_t d, double e) : Module(type_name), dim(d), eps(e) {
  TG_CHECK(d > 0, type_name, "dim must be positive, got ", d);
  weight = empty({d}, init::parameter_options());
  register_parameter("weight", weight);
}

std::string Norm::extra_repr() const {
  std::ostringstream os;
  os << "(" << dim << ",), eps=" << eps;
  return os.str();
}

RMSNorm::RMSNorm(int64_t d, double e, bool offset) : Norm("RMSNorm", d, e), unit_offset(offset) {
  if (offset)
    init::zeros_(weight);
  else
    init::ones_(weight);
}

Tensor RMSNorm::forward(const Tensor& x) {
  if (!unit_offset) return rms_norm(x, weight, eps);
  // As Gemma: (1 + w) in float32 (in bfloat16 1 + w would lose w's low bits), one rounding at the end.
  const DType wide = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  return tg::to(rms_norm(tg::to(x, wide), add(tg::to(weight, wide), 1.0), eps), x.dtype());
}

std::string RMSNorm::extra_repr() const { return Norm::extra_repr() + (unit_offset ? ", unit_offset=True" : ""); }

LayerNorm::LayerNorm(int64_t d, double e, bool with_bias) : Norm("LayerNorm", d, e) {
  init::ones_(weight);
  if (with_bias) {
    bias = empty({d}, init::parameter_options());
    init::zeros_(bias);
  }
  register_parameter("bias", bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight, bias, eps); }

bool is_norm(const Module& m) { return dynamic_cast<const Norm*>(&m) != nullptr; }

}  // namespace tg::nn
