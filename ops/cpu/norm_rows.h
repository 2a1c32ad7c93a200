// The CPU RMSNorm / LayerNorm kernels (one template for both, LN selects LayerNorm). Rows run in
// parallel; everything per row is computed in the accumulation type A (float, or double for
// float64), in a fixed order, so results do not depend on the thread count.
//
// Backward is specialised at compile time on <DX, DW, DB>, as on the GPU: the dx-only variant
// has no parameter-gradient code and touches no partial buffer; with DW/DB the rows are cut
// into P fixed chunks (P from norm_partial_rows, independent of the thread count), chunk p sums
// its rows' dW/dB terms into partial row p, and param_reduce adds the P rows in order.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "core/trace.h"
#include "core/detail/type_dispatch.h"
#include "ops/rms_norm_kernels.h"

namespace tg::cpu::norm_detail {

// Rows per parallel task: at least ~16K elements of work.
inline int64_t row_grain(int64_t dim) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(dim, 1)); }

// Partial rows for the parameter gradients: one per chunk of >= row_grain rows, at most 64.
inline int64_t partial_rows(int64_t rows, int64_t dim) {
  if (rows <= 0) return 0;
  const int64_t g = row_grain(dim);
  return std::clamp<int64_t>((rows + g - 1) / g, 1, 64);
}

// y = (x - mean) * rstd * w + b over each row (mean = 0 and no b for RMSNorm). With a residual
// (fused add, RMSNorm only) r = T(x + residual) is written first and normalised in x's place.
template <class T, bool LN>
void forward(const Tensor& y, const Tensor& r, const Tensor& mean_out, const Tensor& rstd_out,
             const Tensor& x, const Tensor& residual, const Tensor& w, const Tensor& b, double eps) {
  using A = acc_t<T>;
  const int64_t dim = x.shape().back(), rows = dim ? x.numel() / dim : 0;
  const T* px = x.data_ptr<T>();
  const T* pres = residual.defined() ? residual.data_ptr<T>() : nullptr;
  T* pr = r.defined() ? r.data_ptr<T>() : nullptr;
  const T* pw = w.defined() ? w.data_ptr<T>() : nullptr;
  const T* pb = b.defined() ? b.data_ptr<T>() : nullptr;
  T* py = y.data_ptr<T>();
  A* pmean = mean_out.defined() ? mean_out.data_ptr<A>() : nullptr;
  A* prstd = rstd_out.defined() ? rstd_out.data_ptr<A>() : nullptr;
  const A inv_dim = A(1) / A(dim), aeps = static_cast<A>(eps);
  parallel_for(0, rows, row_grain(dim), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const T* xr = px + row * dim;
      if (pres) {  // fused add: the sum, rounded to T, is what gets normalised
        T* rr = pr + row * dim;
        const T* res = pres + row * dim;
        for (int64_t j = 0; j < dim; ++j) rr[j] = convert<T>(convert<A>(xr[j]) + convert<A>(res[j]));
        xr = rr;
      }
      A mu = 0;
      if constexpr (LN) {
        A s = 0;
        for (int64_t j = 0; j < dim; ++j) s += convert<A>(xr[j]);
        mu = s * inv_dim;
      }
      A ss = 0;
      for (int64_t j = 0; j < dim; ++j) {
        A d = convert<A>(xr[j]) - mu;
        ss += d * d;
      }
      const A rs = norm_rstd(ss * inv_dim, aeps);
      if (pmean) pmean[row] = mu;
      if (prstd) prstd[row] = rs;
      T* yr = py + row * dim;
      for (int64_t j = 0; j < dim; ++j) {
        A v = (convert<A>(xr[j]) - mu) * rs;
        if (pw) v = v * convert<A>(pw[j]);
        if (pb) v = v + convert<A>(pb[j]);
        yr[j] = convert<T>(v);
      }
    }
  });
}

// out[j] = sum over p of partial[p][col0 + j], p in order.
template <class A, class T>
void param_reduce(T* out, const A* partial, int64_t P, int64_t width, int64_t col0, int64_t dim) {
  parallel_for(0, dim, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      A s = 0;
      for (int64_t p = 0; p < P; ++p) s += partial[p * width + col0 + j];  // fixed order
      out[j] = convert<T>(s);
    }
  });
}

// One backward launch. dx: [rows, dim] or undefined (DX false); dw, db: [dim] (DW, DB), summed
// through partial: [P, (DW+DB)*dim] in A (undefined when DW and DB are false); dres: added to dx
// when defined.
template <class T, bool LN, bool DX, bool DW, bool DB>
void backward(const char* op, const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& partial,
              const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
              const Tensor& dres) {
  using A = acc_t<T>;
  constexpr bool kNeedX = DX || DW;  // db alone reads only dy
  KernelTrace::record(norm_backward_event(op, {DX, DW, DB}));
  const int64_t dim = dy.shape().back(), rows = dim ? dy.numel() / dim : 0;
  const T* pdy = dy.data_ptr<T>();
  const T* px = kNeedX ? x.data_ptr<T>() : nullptr;
  const T* pw = DX && w.defined() ? w.data_ptr<T>() : nullptr;
  const A* prs = kNeedX ? rstd.data_ptr<A>() : nullptr;
  const A* pmu = LN && kNeedX ? mean.data_ptr<A>() : nullptr;
  T* pdx = DX ? dx.data_ptr<T>() : nullptr;
  const T* pdres = DX && dres.defined() ? dres.data_ptr<T>() : nullptr;
  const A inv_dim = A(1) / A(dim);

  // Everything one row contributes. wacc/bacc: this chunk's partial sums (DW / DB).
  auto row_fn = [&](int64_t row, [[maybe_unused]] A* wacc, [[maybe_unused]] A* bacc) {
    const T* dyr = pdy + row * dim;
    [[maybe_unused]] const T* xr = kNeedX ? px + row * dim : nullptr;
    [[maybe_unused]] const A rs = kNeedX ? prs[row] : A(0);
    [[maybe_unused]] const A mu = pmu ? pmu[row] : A(0);
    if constexpr (DX) {
      A sg = 0, sgx = 0;
      for (int64_t j = 0; j < dim; ++j) {
        const A xh = (convert<A>(xr[j]) - mu) * rs;
        const A g = pw ? convert<A>(dyr[j]) * convert<A>(pw[j]) : convert<A>(dyr[j]);
        if constexpr (LN) sg += g;
        sgx += g * xh;
      }
      const A mg = LN ? sg * inv_dim : A(0), mgx = sgx * inv_dim;
      T* dxr = pdx + row * dim;
      const T* dr = pdres ? pdres + row * dim : nullptr;
      for (int64_t j = 0; j < dim; ++j) {
        const A xh = (convert<A>(xr[j]) - mu) * rs;
        const A g = pw ? convert<A>(dyr[j]) * convert<A>(pw[j]) : convert<A>(dyr[j]);
        A v = norm_dx(g, xh, rs, mg, mgx);
        if (dr) v = v + convert<A>(dr[j]);
        dxr[j] = convert<T>(v);
      }
    }
    if constexpr (DW)
      for (int64_t j = 0; j < dim; ++j) wacc[j] += convert<A>(dyr[j]) * ((convert<A>(xr[j]) - mu) * rs);
    if constexpr (DB)
      for (int64_t j = 0; j < dim; ++j) bacc[j] += convert<A>(dyr[j]);
  };

  if constexpr (!DW && !DB) {
    parallel_for(0, rows, row_grain(dim), [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) row_fn(row, nullptr, nullptr);
    });
  } else {
    const int64_t P = partial.shape()[0];
    A* ppart = partial.data_ptr<A>();
    const int64_t width = (int64_t(DW) + int64_t(DB)) * dim;
    parallel_for(0, P, 1, [&](int64_t plo, int64_t phi) {
      for (int64_t p = plo; p < phi; ++p) {
        A* part = ppart + p * width;
        std::fill(part, part + width, A(0));
        const int64_t r0 = rows * p / P, r1 = rows * (p + 1) / P;
        for (int64_t row = r0; row < r1; ++row) row_fn(row, part, DW ? part + dim : part);
      }
    });
    if constexpr (DW) param_reduce<A>(dw.data_ptr<T>(), ppart, P, width, 0, dim);
    if constexpr (DB) param_reduce<A>(db.data_ptr<T>(), ppart, P, width, DW ? dim : 0, dim);
  }
}

}  // namespace tg::cpu::norm_detail
