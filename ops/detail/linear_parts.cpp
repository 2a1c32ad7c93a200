#include "ops/detail/linear_parts.h"

#include "ops/detail/checks.h"

namespace tg::linear_parts {

void check_linear_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_floating(op, "x", x);
  check_floating(op, "weight", weight);
  check_same(op, {{"x", x}, {"weight", weight}, {"bias", bias}});
  TG_CHECK(weight.dim() == 2, op, "weight must be 2-D [out, in], got ", weight.shape());
  const int64_t out = weight.shape()[0], in = weight.shape()[1];
  TG_CHECK(x.dim() >= 1 && x.shape().back() == in, op, "x has ", x.dim() ? x.shape().back() : 0,
           " features (shape ", x.shape(), "), weight ", weight.shape(), " wants ", in);
  if (bias.defined())
    TG_CHECK(bias.dim() == 1 && bias.shape()[0] == out, op, "bias must be [", out, "], got ", bias.shape());
}

void check_frozen_args(const char* op, const Tensor& x, const FrozenWeight& weight, const Tensor& bias) {
  check_floating(op, "x", x);
  check_same(op, {{"x", x}, {"bias", bias}});
  TG_CHECK(x.dtype() == weight.dtype(), op, "x is ", x.dtype(), ", the ", weight.format(), " weight computes in ",
           weight.dtype());
  TG_CHECK(x.device() == weight.device(), op, "x is on ", x.device(), " but the ", weight.format(), " weight on ",
           weight.device());
  const int64_t out = weight.out_features(), in = weight.in_features();
  TG_CHECK(x.dim() >= 1 && x.shape().back() == in, op, "x has shape ", x.shape(), ", the ", weight.format(),
           " weight [", out, ", ", in, "] wants ", in, " features");
  if (bias.defined())
    TG_CHECK(bias.dim() == 1 && bias.shape()[0] == out, op, "bias must be [", out, "], got ", bias.shape());
}

void check_adapter_args(const char* op, const Tensor& x, int64_t out, int64_t in, const Tensor& lora_A,
                        const Tensor& lora_B) {
  check_floating(op, "lora_A", lora_A);
  check_floating(op, "lora_B", lora_B);
  TG_CHECK(lora_A.device() == x.device() && lora_B.device() == x.device(), op, "lora_A and lora_B must be on ",
           x.device(), " with x, got ", lora_A.device(), " and ", lora_B.device());
  TG_CHECK(lora_A.dim() == 2 && lora_A.shape()[1] == in, op, "lora_A must be [r, ", in, "], got ", lora_A.shape());
  const int64_t rank = lora_A.shape()[0];
  TG_CHECK(lora_B.dim() == 2 && lora_B.shape() == Shape({out, rank}), op, "lora_B must be [", out, ", ", rank,
           "], got ", lora_B.shape());
  TG_CHECK(lora_A.dtype() == lora_B.dtype(), op, "lora_A and lora_B differ in dtype: ", lora_A.dtype(), " and ",
           lora_B.dtype());
  TG_CHECK(lora_A.dtype() == x.dtype() || (lora_A.dtype() == kFloat32 && x.dtype() == kBFloat16), op,
           "adapters of dtype ", lora_A.dtype(), " on a ", x.dtype(), " layer (want the layer's dtype, or float32 "
           "for bfloat16)");
}

Plan plan(const char* op, const Tensor& x, const std::vector<LinearSpec>& specs) {
  Plan plan;
  plan.parts.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const LinearSpec& spec = specs[i];
    TG_CHECK(bool(spec.frozen) == bool(specs[0].frozen), op, "layer ", i, "'s base weight is ",
             spec.frozen ? "frozen in another format" : "a tensor", ", layer 0's ",
             specs[0].frozen ? "frozen in another format" : "a tensor", " (one kind for the group)");
    if (spec.frozen) {
      TG_CHECK(!spec.weight.defined(), op, "layer ", i, " has both a weight and a frozen ", spec.frozen->format(),
               " one");
      check_frozen_args(op, x, *spec.frozen, spec.bias);
    } else {
      check_linear_args(op, x, spec.weight, spec.bias);
    }
    const int64_t out = spec.frozen ? spec.frozen->out_features() : spec.weight.shape()[0];
    const int64_t in = spec.frozen ? spec.frozen->in_features() : spec.weight.shape()[1];
    if (spec.lora_A.defined() || spec.lora_B.defined()) check_adapter_args(op, x, out, in, spec.lora_A, spec.lora_B);
    Part& part = plan.parts[i];
    part.out = out, part.column = plan.out, part.scaling = spec.scaling;
    plan.out += part.out;
    if (spec.lora_A.defined()) {
      TG_CHECK(plan.rank == 0 || spec.lora_A.dtype() == plan.adapter_dtype, op, "layer ", i, "'s adapters are ",
               spec.lora_A.dtype(), ", an earlier layer's ", plan.adapter_dtype, " (one adapter dtype for the group)");
      plan.adapter_dtype = spec.lora_A.dtype();
      part.rank = spec.lora_A.shape()[0], part.lora_column = plan.rank;
      plan.rank += part.rank;
    }
    plan.any_bias = plan.any_bias || spec.bias.defined();
  }
  plan.frozen = bool(specs[0].frozen);
  return plan;
}

Tensor adjacent_weights(const std::vector<LinearSpec>& specs, int64_t out) {
  const Tensor& first = specs[0].weight;
  int64_t next = first.storage_offset();
  for (const LinearSpec& spec : specs) {
    const Tensor& w = spec.weight;
    if (!w.is_contiguous() || !w.shares_storage_with(first) || w.storage_offset() != next) return {};
    next += w.numel();
  }
  return first.detach().as_strided({out, first.shape()[1]}, {first.shape()[1], 1}, first.storage_offset());
}

Tensor column_block(const Tensor& m, int64_t first, int64_t count) {
  return m.as_strided({m.shape()[0], count}, {m.strides()[0], 1}, m.storage_offset() + first);
}

Tensor row_block(const Tensor& m, int64_t first, int64_t count) {
  return m.as_strided({count, m.shape()[1]}, {m.shape()[1], 1}, m.storage_offset() + first * m.shape()[1]);
}

}  // namespace tg::linear_parts
