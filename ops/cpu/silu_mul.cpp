// Fused silu(gate) * up on the CPU: straight-line loops with fast_exp for float (std::exp for
// float64), split across threads by kParallelGrain.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/detail/fast_exp.h"
#include "core/parallel.h"
#include "ops/silu_mul_kernels.h"

namespace tg::cpu {
namespace {

template <class T>
TG_ALWAYS_INLINE T sigmoid(T x) {
  if constexpr (std::is_same_v<T, float>) return 1.0f / (1.0f + fast_exp(-x));
  else return T(1) / (T(1) + std::exp(-x));
}

// Rows of gate / up at their row strides (out, g and the gradients are contiguous), split across
// threads in blocks of about kParallelGrain elements.
template <class F>
void for_rows(const Tensor& gate, F&& f) {
  const int64_t rows = gate.shape()[0], cols = gate.shape()[1];
  parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) f(r, cols);
               });
}

template <class T>
void forward_typed(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const int64_t lda = gate.strides()[0], ldb = up.strides()[0];
  for_rows(gate, [&](int64_t r, int64_t cols) {
    T* o = out.data_ptr<T>() + r * cols;
    const T *a = gate.data_ptr<T>() + r * lda, *b = up.data_ptr<T>() + r * ldb;
    for (int64_t i = 0; i < cols; ++i) o[i] = a[i] * sigmoid(a[i]) * b[i];
  });
}

template <class T>
void backward_typed(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up) {
  const int64_t lda = gate.strides()[0], ldb = up.strides()[0];
  for_rows(gate, [&](int64_t r, int64_t cols) {
    T* da = dgate.defined() ? dgate.data_ptr<T>() + r * cols : nullptr;
    T* db = dup.defined() ? dup.data_ptr<T>() + r * cols : nullptr;
    const T* pg = g.data_ptr<T>() + r * cols;
    const T *a = gate.data_ptr<T>() + r * lda, *b = up.data_ptr<T>() + r * ldb;
    if (da && db) {
      for (int64_t i = 0; i < cols; ++i) {
        const T s = sigmoid(a[i]);
        db[i] = pg[i] * a[i] * s;
        da[i] = pg[i] * b[i] * s * (T(1) + a[i] * (T(1) - s));
      }
    } else if (da) {
      for (int64_t i = 0; i < cols; ++i) {
        const T s = sigmoid(a[i]);
        da[i] = pg[i] * b[i] * s * (T(1) + a[i] * (T(1) - s));
      }
    } else if (db) {
      for (int64_t i = 0; i < cols; ++i) db[i] = pg[i] * a[i] * sigmoid(a[i]);
    }
  });
}

}  // namespace

void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) {
  switch (out.dtype()) {
    case kFloat32: return forward_typed<float>(out, gate, up);
    case kFloat64: return forward_typed<double>(out, gate, up);
    default: fail("silu_mul", "the fused CPU kernel wants float32 or float64, got ", out.dtype());
  }
}

void silu_mul_backward(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up) {
  switch (g.dtype()) {
    case kFloat32: return backward_typed<float>(dgate, dup, g, gate, up);
    case kFloat64: return backward_typed<double>(dgate, dup, g, gate, up);
    default: fail("silu_mul", "the fused CPU kernel wants float32 or float64, got ", g.dtype());
  }
}

}  // namespace tg::cpu
