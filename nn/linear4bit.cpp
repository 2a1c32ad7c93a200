#include "nn/linear4bit.h"

#include "ops/cast.h"

namespace tg::nn {
namespace {

int64_t dim_of(const QuantState4bit& q, size_t i) { return q.shape.size() == 2 ? q.shape[i] : 0; }

}  // namespace

Linear4bit::Linear4bit(QuantState4bit w, const Tensor& b, DType compute, const Tensor& ws)
    : QuantizedLinear("Linear4bit", dim_of(w, 1), dim_of(w, 0), w.packed, b, compute),
      quant_state(std::move(w)),
      workspace(ws) {
  check_quant_state(quant_state, "weight", "Linear4bit");
  TG_CHECK(quant_state.shape.size() == 2, "Linear4bit", "the quantised weight has shape ", quant_state.shape,
           ", wants [out, in]");
  TG_CHECK(compute == kFloat32 || compute == kBFloat16, "Linear4bit", "compute_dtype ", compute,
           ", wants float32 or bfloat16");
  TG_CHECK(!workspace.defined() || workspace.dtype() == compute, "Linear4bit", "workspace has dtype ",
           workspace.dtype(), ", wants the compute dtype ", compute);
  // The state keeps float32 through Module::to(dtype), the workspace the compute dtype.
  for (auto& [name, slot] : state_buffers(quant_state)) register_buffer(name, *slot, true, /*keeps_dtype=*/true);
  register_buffer("workspace", workspace, /*persistent=*/false, /*keeps_dtype=*/true);
}

std::vector<std::pair<const char*, Tensor*>> Linear4bit::state_buffers(QuantState4bit& q) {
  return {{"absmax", &q.absmax}, {"quant_map", &q.quant_map}, {"nested_absmax", &q.nested_absmax},
          {"nested_quant_map", &q.nested_quant_map}};
}

Tensor Linear4bit::forward(const Tensor& x) {
  const Tensor b = bias.defined() ? tg::to(bias, compute_dtype) : bias;
  return tg::to(linear_4bit(tg::to(x, compute_dtype), quant_state, b, workspace), x.dtype());
}

std::shared_ptr<const FrozenWeight> Linear4bit::frozen() const {
  return frozen_4bit(quant_state, compute_dtype, workspace);
}

Tensor Linear4bit::dequantized_weight(DType dtype) const { return dequantize_4bit(quant_state, dtype); }

std::shared_ptr<QuantizedLinear> Linear4bit::with_bias(const Tensor& b) const {
  return std::make_shared<Linear4bit>(quant_state, b, compute_dtype, workspace);
}

std::vector<QuantizedSlot> Linear4bit::state_slots() {
  std::vector<QuantizedSlot> slots;
  for (auto& [name, slot] : state_buffers(quant_state)) slots.push_back({name, slot});
  slots.push_back({"workspace", &workspace, false});
  return slots;
}

std::string Linear4bit::extra_repr() const {
  return Linear::extra_repr() + ", quant_type=" + quant_state.quant_type +
         (quant_state.nested() ? ", double_quant" : "") + ", compute_dtype=" + dtype_name(compute_dtype);
}

}  // namespace tg::nn
