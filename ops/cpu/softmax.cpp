// CPU softmax / log_softmax. Rows (inner == 1): one online pass for max and sum, one pass that
// writes, rows split across threads. Columns (inner > 1): the same two passes over a tile of up
// to kTile neighbouring columns at once, so every load is a contiguous run rather than a
// stride-`inner` walk. Both read x twice and write out once.
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "core/type_dispatch.h"
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

// One tile: columns [0, w) (w <= W) of the n x inner block starting at xb. W = 1 for rows, so
// the column loops vanish there.
template <class T, int64_t W>
void forward_tile(T* ob, const T* xb, int64_t n, int64_t inner, int64_t w, bool log) {
  using A = acc_t<T>;
  OnlineSoftmax<A> st[W];
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < w; ++c) st[c].add(convert<A>(xb[j * inner + c]));
  A shift[W], scale[W];  // y = exp(x - shift) * scale, or x - shift for log_softmax
  for (int64_t c = 0; c < w; ++c) {
    shift[c] = log ? st[c].logsumexp() : st[c].m;
    scale[c] = A(1) / st[c].s;
  }
  if (log) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < w; ++c) ob[j * inner + c] = convert<T>(convert<A>(xb[j * inner + c]) - shift[c]);
  } else {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < w; ++c)
        ob[j * inner + c] = convert<T>(std::exp(convert<A>(xb[j * inner + c]) - shift[c]) * scale[c]);
  }
}

template <class T, int64_t W>
void backward_tile(T* db, const T* gb, const T* yb, int64_t n, int64_t inner, int64_t w, bool log) {
  using A = acc_t<T>;
  A acc[W] = {};  // sum(g * y) for softmax, sum(g) for log_softmax
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < w; ++c) {
      const int64_t i = j * inner + c;
      acc[c] += log ? convert<A>(gb[i]) : convert<A>(gb[i]) * convert<A>(yb[i]);
    }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < w; ++c) {
      const int64_t i = j * inner + c;
      const A gv = convert<A>(gb[i]), yv = convert<A>(yb[i]);
      db[i] = convert<T>(log ? gv - std::exp(yv) * acc[c] : yv * (gv - acc[c]));
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
