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

}  // namespace tg
