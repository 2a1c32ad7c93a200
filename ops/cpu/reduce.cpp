// CPU reductions. Sums accumulate in double (float32 sums over long rows lose digits otherwise).
#include <limits>

#include "core/detail/strided_loop.h"
#include "core/detail/type_dispatch.h"
#include "ops/reduce_kernels.h"

namespace tg::cpu {
namespace {

// Splits x's dims into kept (outer) and reduced (inner) parts.
struct Split {
  Shape kept_shape, kept_strides, red_shape, red_strides;
};

Split split_dims(const Tensor& x, const std::vector<int64_t>& dims) {
  Split s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool red = std::find(dims.begin(), dims.end(), d) != dims.end();
    (red ? s.red_shape : s.kept_shape).push_back(x.shape()[d]);
    (red ? s.red_strides : s.kept_strides).push_back(x.strides()[d]);
  }
  return s;
}

}  // namespace

void sum(const Tensor& out, const Tensor& x, const std::vector<int64_t>& dims) {
  dispatch_floating(x.dtype(), "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data_ptr<T>();
    T* po = out.data_ptr<T>();
    Split s = split_dims(x, dims);
    // Output k is at row-major position k of the kept dims; visit kept positions with their
    // offsets into x, and for each sum the reduced sub-block.
    Shape out_pos_strides = contiguous_strides(s.kept_shape);
    strided_loop<2>(s.kept_shape, {s.kept_strides, out_pos_strides}, [&](int64_t n, auto o, auto k) {
      for (int64_t i = 0; i < n; ++i) {
        double acc = 0;
        strided_loop<1>(s.red_shape, {s.red_strides}, [&](int64_t m, auto ro, auto rk) {
          const T* p = px + o[0] + i * k[0] + ro[0];
          for (int64_t j = 0; j < m; ++j) acc += convert<double>(p[j * rk[0]]);
        }, /*parallel=*/false);
        po[o[1] + i * k[1]] = convert<T>(acc);
      }
    });
  });
}

void max(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t dim) {
  dispatch_floating(x.dtype(), "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* px = x.data_ptr<T>();
    T* pv = values.data_ptr<T>();
    int64_t* pi = indices.data_ptr<int64_t>();
    Split s = split_dims(x, {dim});
    const int64_t n = x.shape()[dim], stride = x.strides()[dim];
    Shape pos_strides = contiguous_strides(s.kept_shape);
    strided_loop<2>(s.kept_shape, {s.kept_strides, pos_strides}, [&](int64_t m, auto o, auto k) {
      for (int64_t i = 0; i < m; ++i) {
        const T* p = px + o[0] + i * k[0];
        A best = convert<A>(p[0]);
        int64_t arg = 0;
        for (int64_t j = 1; j < n; ++j) {
          A v = convert<A>(p[j * stride]);
          if (v > best || (v != v && best == best)) best = v, arg = j;  // NaN wins, as in PyTorch
        }
        pv[o[1] + i * k[1]] = convert<T>(best);
        pi[o[1] + i * k[1]] = arg;
      }
    });
  });
}

void max_backward(const Tensor& dx, const Tensor& g, const Tensor& indices, int64_t dim) {
  dispatch_floating(dx.dtype(), "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* pd = dx.data_ptr<T>();
    const T* pg = g.data_ptr<T>();
    const int64_t* pi = indices.data_ptr<int64_t>();
    std::fill(pd, pd + dx.numel(), convert<T>(0.0));
    int64_t inner = 1;
    for (int64_t k = dim + 1; k < dx.dim(); ++k) inner *= dx.shape()[k];
    const int64_t n = dx.shape()[dim];
    for (int64_t o = 0, count = g.numel(); o < count; ++o)
      pd[((o / inner) * n + pi[o]) * inner + o % inner] = pg[o];
  });
}

}  // namespace tg::cpu
