// Fused rotary embedding on the CPU: one pass over x (forward) or the gradient (backward), rows
// of hd elements split across threads. Each row's two halves are contiguous runs, so the inner
// loops vectorise.
#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "ops/apply_rotary_kernels.h"

namespace tg::cpu {
namespace {

// Element offset of row (b, t) of a [..., T, hd] tensor: off[b] + t * rs (leading dims row-major).
struct Rows {
  std::vector<int64_t> off;
  int64_t rs = 0;
  explicit Rows(const Tensor& t) {
    const int64_t n = t.dim();
    rs = t.strides()[n - 2];
    off.assign(1, 0);
    for (int64_t d = 0; d < n - 2; ++d) {
      std::vector<int64_t> next;
      next.reserve(off.size() * t.shape()[d]);
      for (int64_t o : off)
        for (int64_t i = 0; i < t.shape()[d]; ++i) next.push_back(o + i * t.strides()[d]);
      off = std::move(next);
    }
  }
};

// f(dst_row, src_row, cos_row, sin_row, h) for every row, in parallel.
template <class T, class F>
void for_rows(const Tensor& dst, const Tensor& src, const Tensor& cos, const Tensor& sin, F&& f) {
  const int64_t n = src.dim(), T_ = src.shape()[n - 2], hd = src.shape()[n - 1];
  const Rows d(dst), s(src);
  const int64_t rows = static_cast<int64_t>(s.off.size()) * T_;
  T* pd = dst.data_ptr<T>();
  const T* ps = src.data_ptr<T>();
  const T* pc = cos.data_ptr<T>();
  const T* pn = sin.data_ptr<T>();
  // Contiguous tables, one for every `group` consecutive matrices of x (all of them for [T, hd]).
  const int64_t matrices = static_cast<int64_t>(s.off.size()), group = matrices / (cos.numel() / (T_ * hd));
  parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(hd, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t b = r / T_, t = r % T_, row = (b / group * T_ + t) * hd;
      f(pd + d.off[b] + t * d.rs, ps + s.off[b] + t * s.rs, pc + row, pn + row, hd / 2);
    }
  });
}

template <class T>
void forward_typed(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  for_rows<T>(out, x, cos, sin, [](T* o, const T* x, const T* c, const T* s, int64_t h) {
    for (int64_t i = 0; i < h; ++i) o[i] = x[i] * c[i] - x[i + h] * s[i];
    for (int64_t i = h; i < 2 * h; ++i) o[i] = x[i] * c[i] + x[i - h] * s[i];
  });
}

template <class T>
void backward_typed(const Tensor& dx, const Tensor& g, const Tensor& cos, const Tensor& sin) {
  for_rows<T>(dx, g, cos, sin, [](T* d, const T* g, const T* c, const T* s, int64_t h) {
    for (int64_t j = 0; j < h; ++j) d[j] = g[j] * c[j] + g[j + h] * s[j + h];
    for (int64_t j = h; j < 2 * h; ++j) d[j] = g[j] * c[j] - g[j - h] * s[j - h];
  });
}

}  // namespace

void apply_rotary_forward(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  switch (x.dtype()) {
    case kFloat32: return forward_typed<float>(out, x, cos, sin);
    case kFloat64: return forward_typed<double>(out, x, cos, sin);
    default: fail("apply_rotary", "the fused CPU kernel wants float32 or float64, got ", x.dtype());
  }
}

void apply_rotary_backward(const Tensor& dx, const Tensor& g, const Tensor& cos, const Tensor& sin) {
  switch (g.dtype()) {
    case kFloat32: return backward_typed<float>(dx, g, cos, sin);
    case kFloat64: return backward_typed<double>(dx, g, cos, sin);
    default: fail("apply_rotary", "the fused CPU kernel wants float32 or float64, got ", g.dtype());
  }
}

void apply_rotary_pair_forward(const Tensor& out_q, const Tensor& out_k, const Tensor& q, const Tensor& k,
                               const Tensor& cos, const Tensor& sin) {
  if (q.defined()) apply_rotary_forward(out_q, q, cos, sin);
  if (k.defined()) apply_rotary_forward(out_k, k, cos, sin);
}

void apply_rotary_pair_backward(const Tensor& dq, const Tensor& dk, const Tensor& gq, const Tensor& gk,
                                const Tensor& cos, const Tensor& sin) {
  if (gq.defined()) apply_rotary_backward(dq, gq, cos, sin);
  if (gk.defined()) apply_rotary_backward(dk, gk, cos, sin);
}

}  // namespace tg::cpu
