// Op-level helpers shared by rms_norm.cpp and layer_norm.cpp: argument checks, the [rows, dim]
// view the kernels take, and the bounded parameter-gradient partial buffer + its reduction.
#pragma once

#include <cstdint>
#include <cmath>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/rms_norm_kernels.h"
#include "ops/shape.h"

namespace tg::norm_internal {

// Statistics and partial sums are kept in the accumulation type: float32, float64 for float64.
inline DType acc_dtype(DType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

inline int64_t last_dim(const Tensor& x) { return x.shape().back(); }
inline int64_t row_count(const Tensor& x) { return x.numel() / x.shape().back(); }

// The checks every norm op makes on x and its optional per-feature parameters.
inline void check_inputs(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  check_floating(op, "x", x);
  TG_CHECK(x.dim() >= 1 && x.shape().back() >= 1, op, "x must have at least one dim and a non-empty "
           "last dim (the one normalised), got shape ", x.shape());
  check_same(op, {{"x", x}, {"weight", w}, {"bias", b}});
  const int64_t dim = x.shape().back();
  if (w.defined())
    TG_CHECK(w.dim() == 1 && w.shape()[0] == dim, op, "weight must be [", dim, "] (the last dim of x ",
             x.shape(), "), got ", w.shape());
  if (b.defined())
    TG_CHECK(b.dim() == 1 && b.shape()[0] == dim, op, "bias must be [", dim, "] (the last dim of x ",
             x.shape(), "), got ", b.shape());
  TG_CHECK(std::isfinite(eps) && eps >= 0, op, "eps must be finite and >= 0, got ", eps);
  TG_CHECK(!(x.device().is_cuda() && x.dtype() == kFloat64), op, "float64 runs on the CPU only (it "
           "is there for gradient checks); on ", x.device(), " use float32 or bfloat16");
}

// A contiguous [rows, dim] view of x (a copy only when x is not contiguous). No autograd.
inline Tensor as_rows(const Tensor& x) {
  Tensor c;
  {
    NoGradGuard g;
    c = contiguous(x.detach());
  }
  const int64_t dim = x.shape().back();
  return c.as_strided({c.numel() / dim, dim}, {dim, 1}, c.storage_offset());
}

// A per-feature parameter (w or b) as a contiguous 1-D tensor, or undefined.
inline Tensor as_param(const Tensor& p) {
  if (!p.defined()) return p;
  NoGradGuard g;
  return contiguous(p.detach());
}

// The dw / db partial buffer for a backward launch over x_rows with these flags: [P, parts*dim]
// in the accumulation dtype, or undefined when no parameter gradient is computed (frozen).
inline Tensor partial_buffer(bool layer, bool dx, bool dw, bool db, const Tensor& x_rows) {
  if (!dw && !db) return Tensor();
  int64_t P = 0;
  TG_DISPATCH(x_rows.device(), norm_partial_rows, layer, dx, dw, db, x_rows, P);
  const int64_t width = (int64_t(dw) + int64_t(db)) * x_rows.shape()[1];
  return Tensor::empty({P, width}, {acc_dtype(x_rows.dtype()), x_rows.device()});
}

// After the backward launch over `rows` rows: dw / db (defined when asked) are zero when there
// were no rows (nothing launched), else the backend summed them from the partial rows, which
// the trace records as <op>.dw_reduce / <op>.db_reduce.
inline void finish_param_grads(const char* op, const Tensor& dw, const Tensor& db, int64_t rows) {
  for (const auto& [grad, event] : {std::pair{dw, ".dw_reduce"}, std::pair{db, ".db_reduce"}}) {
    if (!grad.defined()) continue;
    if (rows == 0) zero_(grad);
    else KernelTrace::record(std::string(op) + event);
  }
}

}  // namespace tg::norm_internal
