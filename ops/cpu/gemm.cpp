// GEMM on the CPU through Eigen's packed GEMM kernels (gebp). Each operand is read in place,
// row- or column-major by its unit stride; bfloat16 operands are widened to float32 first
// (Eigen has no bf16 kernels).
//
// We call Eigen's blocked product (general_matrix_matrix_product) directly instead of through
// `C.noalias() = A * B` for two reasons:
//  - Packing buffers. Eigen's expression path allocates its packed blocks (kc x mc of A,
//    kc x nc of B: ~0.3-1 MB for the toy model's shapes) with malloc on every call. Above
//    glibc's mmap / trim thresholds each call then maps fresh pages and faults them in (what
//    that cost: dev/NOTES.md). Here every thread keeps its packing buffers (grown on demand,
//    never freed).
//  - Threads. One product is split into column (or row) panels of C, one per thread, each a
//    sequential Eigen GEMM; several products (a batch) run one per thread.
// Memory traffic per product: A and B are each packed once per panel (B once per thread), C is
// zeroed (beta = 0) or scaled and then accumulated into once per k-block of kc.
#include <algorithm>
#include <cstdlib>
#include <memory>

#include "ops/cpu/eigen.h"
#include "core/parallel.h"
#include "core/primitives.h"
#include "core/detail/type_dispatch.h"
#include "ops/gemm_kernels.h"

namespace tg::cpu {
namespace {

using Index = Eigen::Index;

// A matrix operand in place: element (i, j) at p[i * ld + j] (row-major) or p[i + j * ld].
template <class T>
struct MatView {
  T* p;
  Index ld;
  bool row_major;
  T* at(Index i, Index j) const { return row_major ? p + i * ld + j : p + i + j * ld; }
};

// The rows x cols matrix at p with strides (rs, cs); one of them is 1 (matmul's contract).
template <class T>
MatView<T> view(T* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (cs == 1 || cols == 1) return {p, rows == 1 ? cols : rs, true};
  return {p, cs, false};
}

// This thread's packing buffers, reused across calls (see the file comment).
template <class T>
T* scratch(int which, size_t n) {
  struct Buf {
    std::unique_ptr<T, decltype(&std::free)> p{nullptr, &std::free};
    size_t n = 0;
  };
  thread_local Buf bufs[2];
  Buf& b = bufs[which];
  if (b.n < n) {
    const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    b.p.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    if (!b.p) throw std::bad_alloc();
    b.n = n;
  }
  return b.p.get();
}

// Eigen's blocking (the cache-derived kc, mc, nc of its own product path) with our buffers.
template <class T>
class ThreadBlocking : public Eigen::internal::level3_blocking<T, T> {
 public:
  ThreadBlocking(Index rows, Index cols, Index depth) {
    this->m_mc = rows;
    this->m_nc = cols;
    this->m_kc = depth;
    Eigen::internal::computeProductBlockingSizes<T, T, 1>(this->m_kc, this->m_mc, this->m_nc, Index(1));
    this->m_blockA = scratch<T>(0, static_cast<size_t>(this->m_kc * this->m_mc));
    this->m_blockB = scratch<T>(1, static_cast<size_t>(this->m_kc * this->m_nc));
  }
};

// C += alpha * A B for a column-major C (rows x cols, leading dim ldc), on this thread.
template <class T>
void gemm_colmajor(Index rows, Index cols, Index depth, MatView<const T> a, MatView<const T> b, T* c, Index ldc,
                   T alpha) {
  using namespace Eigen;
  ThreadBlocking<T> blocking(rows, cols, depth);
  auto run = [&](auto lo, auto ro) {
    internal::general_matrix_matrix_product<Index, T, decltype(lo)::value, false, T, decltype(ro)::value, false,
                                            ColMajor, 1>::run(rows, cols, depth, a.p, a.ld, b.p, b.ld, c, 1, ldc,
                                                              alpha, blocking, nullptr);
  };
  using R = std::integral_constant<int, RowMajor>;
  using C = std::integral_constant<int, ColMajor>;
  if (a.row_major) b.row_major ? run(R{}, R{}) : run(R{}, C{});
  else b.row_major ? run(C{}, R{}) : run(C{}, C{});
}

// C = alpha * A B + beta * C for one product, A [M, K], B [K, N], C [M, N] views; the panel
// [r0, r1) x [c0, c1) of C only (so threads can share a product).
template <class T>
void gemm_panel(MatView<T> c, MatView<const T> a, MatView<const T> b, Index K, Index r0, Index r1, Index c0,
                Index c1, T alpha, T beta) {
  const Index m = r1 - r0, n = c1 - c0;
  if (m <= 0 || n <= 0) return;
  // beta first (the GEMM kernel accumulates): zero or scale the panel.
  for (Index i = 0; i < (c.row_major ? m : n); ++i) {
    T* line = c.row_major ? c.at(r0 + i, c0) : c.at(r0, c0 + i);
    const Index len = c.row_major ? n : m;
    if (beta == T(0)) std::fill(line, line + len, T(0));
    else if (beta != T(1)) for (Index j = 0; j < len; ++j) line[j] *= beta;
  }
  if (K == 0) return;
  MatView<const T> as{a.at(r0, 0), a.ld, a.row_major}, bs{b.at(0, c0), b.ld, b.row_major};
  if (!c.row_major) {
    gemm_colmajor<T>(m, n, K, as, bs, c.at(r0, c0), c.ld, alpha);
  } else {  // C^T = B^T A^T is column-major; a transposed view flips the storage order
    MatView<const T> bt{bs.p, bs.ld, !bs.row_major}, at{as.p, as.ld, !as.row_major};
    gemm_colmajor<T>(n, m, K, bt, at, c.at(r0, c0), c.ld, alpha);
  }
}

// Products smaller than this many multiply-adds stay on one thread.
constexpr int64_t kParallelMacs = int64_t{1} << 18;

template <class T>
void gemm_typed(const Tensor& c, const Tensor& a, const Tensor& b, T alpha, T beta) {
  const int64_t B = c.shape()[0], M = c.shape()[1], N = c.shape()[2], K = a.shape()[2];
  if (B == 0 || M == 0 || N == 0) return;
  T* pc = c.data_ptr<T>();
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  auto views = [&](int64_t i) {
    return std::make_tuple(view(pc + i * c.strides()[0], M, N, c.strides()[1], c.strides()[2]),
                           view(pa + i * a.strides()[0], M, K, a.strides()[1], a.strides()[2]),
                           view(pb + i * b.strides()[0], K, N, b.strides()[1], b.strides()[2]));
  };
  const int threads = get_num_threads();
  if (B > 1 || threads == 1 || M * N * K < kParallelMacs) {
    // Several products: one per thread. One small product: this thread.
    parallel_for(0, B, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        auto [cv, av, bv] = views(i);
        gemm_panel<T>(cv, av, bv, K, 0, M, 0, N, alpha, beta);
      }
    });
    return;
  }
  // One product: panels of C along its longer side, aligned to the GEMM kernel's tiles.
  auto [cv, av, bv] = views(0);
  const bool split_rows = M >= N;
  const int64_t len = split_rows ? M : N, align = 16;
  const int64_t panels = std::min<int64_t>(threads, (len + align - 1) / align);
  const int64_t step = ((len + panels - 1) / panels + align - 1) / align * align;
  // Captured by name: C++20 allows capturing structured bindings, clang 14 does not.
  parallel_for(0, panels, 1, [&, cv = cv, av = av, bv = bv](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t s0 = std::min(len, t * step), s1 = std::min(len, s0 + step);
      if (split_rows) gemm_panel<T>(cv, av, bv, K, s0, s1, 0, N, alpha, beta);
      else gemm_panel<T>(cv, av, bv, K, 0, M, s0, s1, alpha, beta);
    }
  });
}

}  // namespace

void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  auto widen = [](const Tensor& t) {
    if (t.dtype() == kFloat32) return t;
    Tensor f = Tensor::empty(t.shape(), {kFloat32, Device::cpu()});
    copy_(f, t);
    return f;
  };
  switch (c.dtype()) {
    case kFloat32:  // a and b float32, or bfloat16 (widened: Eigen has no bf16 kernels)
      return gemm_typed<float>(c, widen(a), widen(b), static_cast<float>(alpha), static_cast<float>(beta));
    case kFloat64: return gemm_typed<double>(c, a, b, alpha, beta);
    case kBFloat16: {
      Tensor c32 = widen(c);  // beta may read c
      gemm_typed<float>(c32, widen(a), widen(b), static_cast<float>(alpha), static_cast<float>(beta));
      copy_(c, c32);
      return;
    }
    default: fail("gemm", "wants floating-point operands, got ", c.dtype());
  }
}

}  // namespace tg::cpu
