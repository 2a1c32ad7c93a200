// clamped_swiglu on the CPU: a row of gate_up at a time in its accumulation type (float for
// bfloat16 and float32, double for float64), rows split across threads by kParallelGrain.
#include <algorithm>
#include <cmath>

#include "core/detail/type_dispatch.h"
#include "core/parallel.h"
#include "ops/clamped_swiglu_kernels.h"

namespace tg::cpu {
namespace {

// f(r, in, width): row r of gate_up (in, at its row stride) with width outputs.
template <class F>
void for_rows(const Tensor& gate_up, F&& f) {
  const int64_t rows = gate_up.shape()[0], width = gate_up.shape()[1] / 2, ld = gate_up.strides()[0];
  parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(width, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) f(r, r * ld, width);
               });
}

}  // namespace

void clamped_swiglu(const Tensor& out, const Tensor& gate_up, double alpha, double limit) {
  dispatch_floating(out.dtype(), "clamped_swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A al = static_cast<A>(alpha), L = static_cast<A>(limit);
    const T* in = gate_up.data_ptr<T>();
    T* o = out.data_ptr<T>();
    for_rows(gate_up, [&](int64_t r, int64_t at, int64_t width) {
      for (int64_t i = 0; i < width; ++i) {
        const A g = std::min(convert<A>(in[at + 2 * i]), L);
        const A u = std::clamp(convert<A>(in[at + 2 * i + 1]), -L, L);
        o[r * width + i] = convert<T>((u + A(1)) * g / (A(1) + std::exp(-al * g)));
      }
    });
  });
}

void clamped_swiglu_backward(const Tensor& dgate_up, const Tensor& g, const Tensor& gate_up, double alpha,
                             double limit) {
  dispatch_floating(g.dtype(), "clamped_swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A al = static_cast<A>(alpha), L = static_cast<A>(limit);
    const T *in = gate_up.data_ptr<T>(), *pg = g.data_ptr<T>();
    T* d = dgate_up.data_ptr<T>();
    for_rows(gate_up, [&](int64_t r, int64_t at, int64_t width) {
      for (int64_t i = 0; i < width; ++i) {
        const A a = convert<A>(in[at + 2 * i]), b = convert<A>(in[at + 2 * i + 1]), go = convert<A>(pg[r * width + i]);
        const A gate = std::min(a, L), up = std::clamp(b, -L, L), s = A(1) / (A(1) + std::exp(-al * gate));
        d[2 * (r * width + i)] = convert<T>(a <= L ? go * (up + A(1)) * s * (A(1) + al * gate * (A(1) - s)) : A(0));
        d[2 * (r * width + i) + 1] = convert<T>(std::abs(b) <= L ? go * gate * s : A(0));
      }
    });
  });
}

}  // namespace tg::cpu
