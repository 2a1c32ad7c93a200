// GEMM on the CPU through Eigen. Each operand is mapped in place (row- or column-major by its
// unit stride); bfloat16 operands are widened to float32 first (Eigen has no bf16 kernels).
#include <Eigen/Core>

#include "core/parallel.h"
#include "core/primitives.h"
#include "core/type_dispatch.h"
#include "ops/gemm_kernels.h"

namespace tg::cpu {
namespace {

template <class T>
using RowMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
template <class T>
using ColMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>, 0, Eigen::OuterStride<>>;

// Calls f(map) with an Eigen view of the rows x cols matrix at p with strides (rs, cs).
template <class T, class F>
void with_matrix(T* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs, F&& f) {
  if (cs == 1 || cols == 1) f(RowMap<T>(p, rows, cols, Eigen::OuterStride<>(rows == 1 ? cols : rs)));
  else f(ColMap<T>(p, rows, cols, Eigen::OuterStride<>(cols == 1 ? rows : cs)));
}

template <class T>
void gemm_typed(const Tensor& c, const Tensor& a, const Tensor& b, T alpha, T beta) {
  const int64_t B = c.shape()[0], M = c.shape()[1], N = c.shape()[2], K = a.shape()[2];
  T* pc = c.data_ptr<T>();
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  auto one = [&](int64_t i) {
    with_matrix(pc + i * c.strides()[0], M, N, c.strides()[1], c.strides()[2], [&](auto C) {
      with_matrix(const_cast<T*>(pa) + i * a.strides()[0], M, K, a.strides()[1], a.strides()[2], [&](auto A) {
        with_matrix(const_cast<T*>(pb) + i * b.strides()[0], K, N, b.strides()[1], b.strides()[2], [&](auto Bm) {
          if (beta == T(0)) C.noalias() = alpha * (A * Bm);
          else C = beta * C + alpha * (A * Bm);
        });
      });
    });
  };
  // Several products: one per thread (Eigen stays single-threaded inside a parallel region).
  // One product: Eigen parallelises it itself.
  if (B > 1) parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) { for (int64_t i = lo; i < hi; ++i) one(i); });
  else one(0);
}

}  // namespace

void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  switch (c.dtype()) {
    case kFloat32: return gemm_typed<float>(c, a, b, static_cast<float>(alpha), static_cast<float>(beta));
    case kFloat64: return gemm_typed<double>(c, a, b, alpha, beta);
    case kBFloat16: {
      auto widen = [](const Tensor& t) {
        Tensor f = Tensor::empty(t.shape(), {kFloat32, Device::cpu()});
        copy_(f, t);
        return f;
      };
      Tensor c32 = widen(c);  // beta may read c
      gemm_typed<float>(c32, widen(a), widen(b), static_cast<float>(alpha), static_cast<float>(beta));
      copy_(c, c32);
      return;
    }
    default: fail("gemm", "wants floating-point operands, got ", c.dtype());
  }
}

}  // namespace tg::cpu
