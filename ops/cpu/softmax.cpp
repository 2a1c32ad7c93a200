// CPU softmax / log_softmax. Rows (inner == 1): the max and sum(exp) statistics, then one pass
// that writes, rows split across threads. Columns (inner > 1): the same passes over a tile of up
// to kTile neighbouring columns at once, so every load is a contiguous run rather than a
// stride-`inner` walk. float32 / bfloat16 rows use the vectorised two-pass statistics and
// fast_exp of softmax_rows.h (three reads of a row, in L1); float64 the online one-pass form
// and std::exp (two reads). Out is written once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/detail/fast_exp.h"
#include "core/parallel.h"
#include "core/detail/type_dispatch.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/softmax_kernels.h"
#include "ops/softmax_math.h"

namespace tg::cpu {
namespace {

constexpr int64_t kTile = 64;

// Calls f(o, c0, w) for every (outer index, tile of w columns starting at c0), in parallel.
template <class F>
void for_tiles(SoftmaxGeometry geo, F&& f) {
  const int64_t tiles = (geo.inner + kTile - 1) / kTile;
  const int64_t work = geo.n * std::min(geo.inner, kTile);
  parallel_for(0, geo.outer * tiles, std::max<int64_t>(1, kParallelGrain / work), [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      const int64_t o = u / tiles, c0 = (u % tiles) * kTile;
      f(o, c0, std::min(kTile, geo.inner - c0));
    }
  });
}

template <class A>
inline A exp_of(A x) {
  if constexpr (std::is_same_v<A, float>) return fast_exp(x);
  else return std::exp(x);
}

// The functions below work on one tile: columns [0, w) (w <= W) of the n x inner block starting
// at xb. W = 1 for rows, where they take the contiguous-row loops.

// The per-column statistics of a tile: running max m and sum s of exp(x - m).
template <class T, int64_t W>
void tile_stats(acc_t<T>* m, acc_t<T>* s, const T* xb, int64_t n, int64_t inner, int64_t w) {
  using A = acc_t<T>;
  if constexpr (std::is_same_v<A, float>) {
    if (W == 1) {  // a contiguous row
      m[0] = row_max(xb, n);
      s[0] = row_sum_exp(xb, n, m[0]);
      return;
    }
    for (int64_t c = 0; c < w; ++c) m[c] = -std::numeric_limits<float>::infinity(), s[c] = 0.0f;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < w; ++c) {
        const float v = convert<float>(xb[j * inner + c]);
        m[c] = v > m[c] ? v : m[c];
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < w; ++c) s[c] += fast_exp(convert<float>(xb[j * inner + c]) - m[c]);
  } else {
    OnlineSoftmax<A> st[W];
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < w; ++c) st[c].add(convert<A>(xb[j * inner + c]));
    for (int64_t c = 0; c < w; ++c) m[c] = st[c].m, s[c] = st[c].s;
  }
}

template <class T, int64_t W>
void forward_tile(T* ob, const T* xb, int64_t n, int64_t inner, int64_t w, bool log) {
  using A = acc_t<T>;
  A m[W] = {}, s[W] = {};
  tile_stats<T, W>(m, s, xb, n, inner, w);
  A shift[W] = {}, scale[W] = {};  // y = exp(x - shift) * scale, or x - shift for log_softmax
  for (int64_t c = 0; c < w; ++c) {
    shift[c] = log ? m[c] + std::log(s[c]) : m[c];
    scale[c] = A(1) / s[c];
  }
  if (W == 1) {  // a contiguous row: loops the compiler vectorises
    const A sh = shift[0], sc = scale[0];
    if (log)
      for (int64_t j = 0; j < n; ++j) ob[j] = convert<T>(convert<A>(xb[j]) - sh);
    else
      for (int64_t j = 0; j < n; ++j) ob[j] = convert<T>(exp_of(convert<A>(xb[j]) - sh) * sc);
  } else if (log) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < w; ++c) ob[j * inner + c] = convert<T>(convert<A>(xb[j * inner + c]) - shift[c]);
  } else {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < w; ++c)
        ob[j * inner + c] = convert<T>(exp_of(convert<A>(xb[j * inner + c]) - shift[c]) * scale[c]);
  }
}

template <class T, int64_t W>
void backward_tile(T* db, const T* gb, const T* yb, int64_t n, int64_t inner, int64_t w, bool log) {
  using A = acc_t<T>;
  A acc[W] = {};  // sum(g * y) for softmax, sum(g) for log_softmax
  if constexpr (std::is_same_v<A, float> && W == 1) {  // a contiguous row: a vectorised reduction
    acc[0] = log ? row_sum(gb, n) : row_dot(gb, yb, n);
  } else {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < w; ++c) {
        const int64_t i = j * inner + c;
        acc[c] += log ? convert<A>(gb[i]) : convert<A>(gb[i]) * convert<A>(yb[i]);
      }
  }
  if (W == 1) {  // a contiguous row
    const A a = acc[0];
    if (log)
      for (int64_t j = 0; j < n; ++j) db[j] = convert<T>(convert<A>(gb[j]) - exp_of(convert<A>(yb[j])) * a);
    else
      for (int64_t j = 0; j < n; ++j) db[j] = convert<T>(convert<A>(yb[j]) * (convert<A>(gb[j]) - a));
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < w; ++c) {
      const int64_t i = j * inner + c;
      const A gv = convert<A>(gb[i]), yv = convert<A>(yb[i]);
      db[i] = convert<T>(log ? gv - exp_of(yv) * acc[c] : yv * (gv - acc[c]));
    }
}

template <class T>
void forward(const Tensor& out, const Tensor& x, SoftmaxGeometry geo, bool log) {
  const T* px = x.data_ptr<T>();
  T* po = out.data_ptr<T>();
  const int64_t n = geo.n, inner = geo.inner;
  for_tiles(geo, [&](int64_t o, int64_t c0, int64_t w) {
    const int64_t base = o * n * inner + c0;
    if (inner == 1) forward_tile<T, 1>(po + base, px + base, n, inner, w, log);
    else forward_tile<T, kTile>(po + base, px + base, n, inner, w, log);
  });
}

template <class T>
void backward(const Tensor& dx, const Tensor& g, const Tensor& y, SoftmaxGeometry geo, bool log) {
  const T* pg = g.data_ptr<T>();
  const T* py = y.data_ptr<T>();
  T* pd = dx.data_ptr<T>();
  const int64_t n = geo.n, inner = geo.inner;
  for_tiles(geo, [&](int64_t o, int64_t c0, int64_t w) {
    const int64_t base = o * n * inner + c0;
    if (inner == 1) backward_tile<T, 1>(pd + base, pg + base, py + base, n, inner, w, log);
    else backward_tile<T, kTile>(pd + base, pg + base, py + base, n, inner, w, log);
  });
}

}  // namespace

void softmax(const Tensor& out, const Tensor& x, SoftmaxGeometry geo, bool log) {
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    forward<typename decltype(tag)::type>(out, x, geo, log);
  });
}

void softmax_backward(const Tensor& dx, const Tensor& g, const Tensor& y, SoftmaxGeometry geo, bool log) {
  dispatch_floating(dx.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    backward<typename decltype(tag)::type>(dx, g, y, geo, log);
  });
}

}  // namespace tg::cpu
