// Backend contract for rms_norm and fused_add_rms_norm, and the pieces layer_norm shares with
// them (the partial-buffer query and the row math).
//
// Shapes: x, y, r, dy, dx, residual, dres are contiguous [rows, dim] in the input dtype T;
// w (and layer_norm's b) contiguous [dim] in T or undefined; the statistics (rstd, mean) are
// [rows] in the accumulation dtype (float32 for float32/bfloat16 inputs, float64 for float64).
//
// Backward: one pass over x and dy computes every requested gradient. Which ones is given by
// which outputs are defined (dx, dw, db), and each backend maps that to a kernel specialised
// at compile time on <COMPUTE_DX, COMPUTE_DW, COMPUTE_DB>: a frozen weight runs code with no
// weight-gradient accumulation at all, and the op allocates no partial buffer for it.
// Parameter gradients go through a bounded partial buffer [P, nparts * dim] (accumulation
// dtype; P from norm_partial_rows, nparts = dw + db): each chunk of rows sums into its partial
// row, then the backend adds the rows column-wise in a fixed order (on the GPU in the same
// kernel, after a grid barrier), so dW and dB are bitwise identical from run to run.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "core/bfloat16.h"  // TG_HOST_DEVICE
#include "core/tensor.h"

namespace tg {

// ---- the mask -> kernel variant mechanism of both norm ops, on both backends ----
// The gradients one norm backward computes; the op derives it from the engine's mask, the
// backends from which outputs are defined.
struct NormGrads {
  bool dx = false, dw = false, db = false;
};
// "dx,dw,db" for the gradients computed ("none" for none): what plans print and traces name.
inline std::string norm_variant(NormGrads g) {
  std::string v;
  for (const auto& [on, name] : {std::pair{g.dx, "dx"}, std::pair{g.dw, "dw"}, std::pair{g.db, "db"}})
    if (on) v += (v.empty() ? "" : ",") + std::string(name);
  return v.empty() ? "none" : v;
}
// The KernelTrace event of a backward variant, e.g. "rms_norm.backward<dx,dw>".
inline std::string norm_backward_event(const char* op, NormGrads g) {
  return std::string(op) + ".backward<" + norm_variant(g) + ">";
}
// Calls f(bool_constant<DX>, bool_constant<DW>, bool_constant<DB>) for g: every variant is its
// own instantiation, so a frozen parameter runs code without its gradient. Nothing for none.
template <class F>
void with_norm_variant(NormGrads g, F&& f) {
  using std::bool_constant;
  auto db = [&](auto dx, auto dw) {
    if (g.db) f(dx, dw, bool_constant<true>{});
    else if constexpr (decltype(dx)::value || decltype(dw)::value) f(dx, dw, bool_constant<false>{});
  };
  auto dw = [&](auto dx) {
    if (g.dw) db(dx, bool_constant<true>{});
    else db(dx, bool_constant<false>{});
  };
  if (g.dx) dw(bool_constant<true>{});
  else dw(bool_constant<false>{});
}

// ---- row math shared by the CPU and CUDA kernels (A is float or double) ----
// 1 / sqrt(mean_square + eps): the reciprocal standard deviation of one row.
template <class A>
TG_HOST_DEVICE inline A norm_rstd(A mean_square, A eps) {
  return A(1) / std::sqrt(mean_square + eps);
}
// dx of one element: rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
// RMSNorm passes mean_g = 0 (its mean is not subtracted in forward).
template <class A>
TG_HOST_DEVICE inline A norm_dx(A g, A xhat, A rstd, A mean_g, A mean_gxhat) {
  return rstd * ((g - mean_g) - xhat * mean_gxhat);
}

namespace cpu {
// y = x * rstd * w. When residual is defined (fused_add_rms_norm), r = x + residual is written
// (rounded to T) and it is r that is normalised. rstd is written when defined.
void rms_norm_forward(const Tensor& y, const Tensor& r, const Tensor& rstd, const Tensor& x,
                      const Tensor& residual, const Tensor& w, double eps);
// dx (when defined) = the RMSNorm input gradient (+ dres when defined: fused_add_rms_norm's
// gradient of r); dw (when defined) = the weight gradient, summed through partial [P, dim].
// `op` names the variant in the KernelTrace.
void rms_norm_backward(const char* op, const Tensor& dx, const Tensor& dw, const Tensor& partial, const Tensor& dy,
                       const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres);
// P: rows of the partial buffer a backward launch over x [rows, dim] with these flags uses.
void norm_partial_rows(bool layer_norm, bool dx, bool dw, bool db, const Tensor& x, int64_t& rows_out);
}  // namespace cpu

namespace cuda {
void rms_norm_forward(const Tensor& y, const Tensor& r, const Tensor& rstd, const Tensor& x,
                      const Tensor& residual, const Tensor& w, double eps);
void rms_norm_backward(const char* op, const Tensor& dx, const Tensor& dw, const Tensor& partial, const Tensor& dy,
                       const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres);
void norm_partial_rows(bool layer_norm, bool dx, bool dw, bool db, const Tensor& x, int64_t& rows_out);
}  // namespace cuda

}  // namespace tg
