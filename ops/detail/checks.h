// Argument checks shared by the ops. Each names the op, the argument and what it got.
#pragma once

#include <initializer_list>

#include "core/autograd.h"
#include "core/tensor.h"

namespace tg {

inline void check_defined(const char* op, const char* name, const Tensor& t) {
  TG_CHECK(t.defined(), op, "argument '", name, "' is an undefined tensor");
}

inline void check_floating(const char* op, const char* name, const Tensor& t) {
  check_defined(op, name, t);
  TG_CHECK(is_floating_point(t.dtype()), op, "'", name, "' must be floating point (float32, "
           "bfloat16 or float64), got ", t.dtype());
}

inline void check_dtype(const char* op, const char* name, const Tensor& t, DType want) {
  check_defined(op, name, t);
  TG_CHECK(t.dtype() == want, op, "'", name, "' has dtype ", t.dtype(), ", wants ", want);
}

// All defined tensors share the first one's device (and dtype, when same_dtype).
inline void check_same(const char* op, std::initializer_list<NamedInput> ts, bool same_dtype = true) {
  const NamedInput* first = nullptr;
  for (const auto& t : ts) {
    if (!t.tensor.defined()) continue;
    if (!first) {
      first = &t;
      continue;
    }
    TG_CHECK(t.tensor.device() == first->tensor.device(), op, "'", t.name, "' is on ",
             t.tensor.device(), " but '", first->name, "' is on ", first->tensor.device(),
             " (move both to one device with tg::to)");
    TG_CHECK(!same_dtype || t.tensor.dtype() == first->tensor.dtype(), op, "'", t.name,
             "' has dtype ", t.tensor.dtype(), " but '", first->name, "' has ", first->tensor.dtype(),
             " (cast one with tg::to(x, dtype))");
  }
}

// A linear layer's arguments, y = x W^T + b (+ scaling (x A^T) B^T when lora_A / lora_B are
// defined): lora_linear's and each part of linear_group's.
inline void check_linear_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const Tensor& lora_A, const Tensor& lora_B) {
  check_floating(op, "x", x);
  check_floating(op, "weight", weight);
  check_same(op, {{"x", x}, {"weight", weight}, {"bias", bias}});
  TG_CHECK(weight.dim() == 2, op, "weight must be 2-D [out, in], got ", weight.shape());
  const int64_t out = weight.shape()[0], in = weight.shape()[1];
  TG_CHECK(x.dim() >= 1 && x.shape().back() == in, op, "x has ", x.dim() ? x.shape().back() : 0,
           " features (shape ", x.shape(), "), weight ", weight.shape(), " wants ", in);
  if (bias.defined())
    TG_CHECK(bias.dim() == 1 && bias.shape()[0] == out, op, "bias must be [", out, "], got ", bias.shape());
  if (!lora_A.defined() && !lora_B.defined()) return;
  check_floating(op, "lora_A", lora_A);
  check_floating(op, "lora_B", lora_B);
  TG_CHECK(lora_A.device() == x.device() && lora_B.device() == x.device(), op, "lora_A and lora_B must be on ",
           x.device(), " with x, got ", lora_A.device(), " and ", lora_B.device());
  TG_CHECK(lora_A.dim() == 2 && lora_A.shape()[1] == in, op, "lora_A must be [r, ", in, "], got ", lora_A.shape());
  const int64_t r = lora_A.shape()[0];
  TG_CHECK(lora_B.dim() == 2 && lora_B.shape() == Shape({out, r}), op, "lora_B must be [", out, ", ", r, "], got ",
           lora_B.shape());
  TG_CHECK(lora_A.dtype() == lora_B.dtype(), op, "lora_A and lora_B differ in dtype: ", lora_A.dtype(), " and ",
           lora_B.dtype());
  TG_CHECK(lora_A.dtype() == x.dtype() || (lora_A.dtype() == kFloat32 && x.dtype() == kBFloat16), op,
           "adapters of dtype ", lora_A.dtype(), " on a ", x.dtype(), " layer (want the layer's dtype, or float32 "
           "for bfloat16)");
}

}  // namespace tg
