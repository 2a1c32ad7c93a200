#include "nn/norm.h"

#include <sstream>

#include "core/factory.h"
#include "nn/init.h"
#include "ops/layer_norm.h"
#include "ops/rms_norm.h"

namespace tg::nn {
namespace {

std::string norm_repr(int64_t dim, double eps) {
  std::ostringstream os;
  os << "(" << dim << ",), eps=" << eps;
  return os.str();
}

}  // namespace

RMSNorm::RMSNorm(int64_t d, double e) : Module("RMSNorm"), dim(d), eps(e) {
  TG_CHECK(d > 0, "RMSNorm", "dim must be positive, got ", d);
  weight = empty({d}, init::parameter_options());
  init::ones_(weight);
  register_parameter("weight", weight);
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, weight, eps); }

std::string RMSNorm::extra_repr() const { return norm_repr(dim, eps); }

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

}  // namespace tg::nn
