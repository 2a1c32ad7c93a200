#include "nn/linear.h"

#include <cmath>
#include <typeinfo>

#include "core/factory.h"
#include "nn/detail/adjacent_storage.h"
#include "nn/init.h"
#include "ops/linear.h"

namespace tg::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator& gen)
    : Module("Linear"), in_features(in), out_features(out) {
  TG_CHECK(in > 0 && out > 0, "Linear", "features must be positive, got in ", in, ", out ", out);
  weight = init::deferring_linear_weights() ? init::unallocated({out, in}, init::parameter_options())
                                            : empty({out, in}, init::parameter_options());
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  if (with_bias) {
    bias = empty({out}, init::parameter_options());
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    init::uniform_(bias, -bound, bound, gen);
  }
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Linear::Linear(const std::string& type_name, int64_t in, int64_t out, const Tensor& w, const Tensor& b)
    : Module(type_name), in_features(in), out_features(out), weight(w), bias(b) {
  // A uint8 weight is bitsandbytes' packed 4-bit layout (nn::Linear4bit, and LoRA on it), checked there.
  const bool packed = weight.defined() && weight.dtype() == kUInt8;
  TG_CHECK(packed || (weight.defined() && weight.dim() == 2 && weight.shape() == Shape({out, in})),
           type_name.c_str(), "weight must be a 2-D [out, in] tensor");
  TG_CHECK(!bias.defined() || bias.shape() == Shape({out}), type_name.c_str(), "bias must be [", out, "], got ",
           bias.defined() ? shape_str(bias.shape()) : "");
  const bool w_grad = weight.requires_grad(), b_grad = bias.defined() && bias.requires_grad();
  register_parameter("weight", weight, w_grad);
  register_parameter("bias", bias, b_grad);
}

Linear::Linear(const Tensor& w, const Tensor& b)
    : Linear("Linear", w.defined() && w.dim() == 2 ? w.shape()[1] : 0, w.defined() && w.dim() == 2 ? w.shape()[0] : 0,
             w, b) {}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

bool Linear::is_plain() const { return typeid(*this) == typeid(Linear); }

std::optional<LinearSpec> Linear::spec() const {
  if (!is_plain()) return std::nullopt;
  return LinearSpec{weight, bias};
}

void place_weights_adjacent(const std::vector<std::shared_ptr<Linear>>& layers) {
  if (layers.size() < 2) return;
  const Tensor& w0 = layers[0]->weight;
  std::vector<Tensor> weights;
  for (const auto& layer : layers) {
    const Tensor& w = layer->weight;
    if (!w.defined() || init::is_unallocated(w) || !w.is_contiguous() || w.dim() != 2 || w.dtype() != w0.dtype() ||
        w.device() != w0.device() || w.shape()[1] != w0.shape()[1])
      return;
    weights.push_back(w);
  }
  // Under init::skipping() the values are uninitialised: the file's come next.
  const std::vector<Tensor> blocks = detail::adjacent_copies(weights, !init::skipping());
  for (size_t i = 0; i < layers.size(); ++i) detail::set_data(layers[i]->weight, blocks[i]);
}

std::vector<Tensor> forward_group(const std::vector<std::shared_ptr<Linear>>& layers, const Tensor& x) {
  std::vector<LinearSpec> specs;
  std::optional<DType> adapters;
  for (const auto& layer : layers) {
    std::optional<LinearSpec> s = layer->spec();
    if (!s || (!specs.empty() && bool(s->frozen) != bool(specs[0].frozen))) break;
    const DType dtype = s->frozen ? s->frozen->dtype() : s->weight.dtype();
    const Device device = s->frozen ? s->frozen->device() : s->weight.device();
    if (dtype != x.dtype() || device != x.device()) break;
    if (s->lora_A.defined()) {
      if (adapters && *adapters != s->lora_A.dtype()) break;
      adapters = s->lora_A.dtype();
    }
    specs.push_back(*s);
  }
  if (specs.size() == layers.size()) return linear_group(x, specs);
  std::vector<Tensor> out;
  for (const auto& layer : layers) out.push_back(layer->forward(x));
  return out;
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + (bias.defined() ? "true" : "false");
}

}  // namespace tg::nn
