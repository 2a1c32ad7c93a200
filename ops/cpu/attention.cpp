// Fused causal / full attention on the CPU (flash-attention's recomputation scheme, with whole
// key rows per query block since a CPU cache holds them).
//
// Forward, per (batch*head, block of kBlockQ queries): scores = Q_blk K^T for the keys the block
// can see (causal: keys < the block's last query + 1, so the upper triangle beyond the diagonal
// block is never computed), row softmax in a [kBlockQ, S] scratch that stays in L1/L2, then
// O_blk = P V. Memory traffic: q, k, v read once per block (k, v once per block of queries),
// out and lse written once; nothing of size L x S reaches memory.
//
// Backward, per kv head (dk and dv accumulate over query blocks and over the query heads of a
// grouped-query group, so one thread owns a kv head): per query head D = rowsum(dO * O), then
// per query block P is recomputed from the scores and lse, and dv += P^T dO, dP = dO V^T,
// dS = P (dP - D) scale, dq = dS K, dk += dS^T Q. Traffic: q, k, v, out, dout read once per
// block, dq written once, dk / dv of a kv head stay in cache.
//
// With a mask, a masked key's score is -inf before the row max (so its probability is 0), and a
// row with no key left is zero with lse = -inf. A head's sink is one more score of each row, in
// the max and the sum only: lse takes it in, so backward needs nothing of it.
//
// The small products go through Eigen (packed GEMM kernels); the row loops are straight-line so
// they vectorise, with fast_exp for float (std::exp for float64, the gradcheck reference).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/eigen.h"
#include "core/detail/fast_exp.h"
#include "core/parallel.h"
#include "core/detail/type_dispatch.h"
#include "ops/attention_kernels.h"

namespace tg::cpu {
namespace {

// Query rows per block: small enough that the causal blocks skip most of the upper triangle
// and the [kBlockQ, S] scratch stays in cache, large enough to keep Eigen's GEMM kernels busy.
constexpr int64_t kBlockQ = 32;

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Rows = Eigen::Map<Mat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using ConstRows = Eigen::Map<const Mat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class T>
inline T exp_of(T x) {
  if constexpr (std::is_same_v<T, float>) return fast_exp(x);
  else return std::exp(x);
}

// One operand of a batched attention product: element (b, row, col) of a [..., rows, cols]
// tensor with a unit column stride lives at base + off[b] + row * rs + col.
template <class T>
struct Operand {
  T* base = nullptr;
  std::vector<int64_t> off;
  int64_t rs = 0;

  Operand() = default;
  explicit Operand(const Tensor& t) {
    if (!t.defined()) return;
    base = static_cast<T*>(t.data_ptr());
    const int64_t n = t.dim();
    rs = t.strides()[n - 2];
    off.assign(1, 0);
    for (int64_t d = 0; d < n - 2; ++d) {  // row-major over the leading dims
      std::vector<int64_t> next;
      next.reserve(off.size() * t.shape()[d]);
      for (int64_t o : off)
        for (int64_t i = 0; i < t.shape()[d]; ++i) next.push_back(o + i * t.strides()[d]);
      off = std::move(next);
    }
  }
  explicit operator bool() const { return base != nullptr; }
  T* row(int64_t b, int64_t r) const { return base + off[b] + r * rs; }
  // rows [r0, r0 + m) of matrix b as an m x cols Eigen view
  Rows<T> rows(int64_t b, int64_t r0, int64_t m, int64_t cols) const {
    return Rows<T>(row(b, r0), m, cols, Eigen::OuterStride<>(rs));
  }
  ConstRows<T> crows(int64_t b, int64_t r0, int64_t m, int64_t cols) const {
    return ConstRows<T>(row(b, r0), m, cols, Eigen::OuterStride<>(rs));
  }
};

// Grouped-query attention: matrix b of q (one query head) reads matrix kv(b) of k and v.
struct HeadMap {
  int64_t hq = 1, hkv = 1;
  HeadMap(const Tensor& q, const Tensor& k) {
    if (q.dim() >= 3) hq = q.shape()[q.dim() - 3], hkv = k.shape()[k.dim() - 3];
  }
  int64_t group() const { return hq / hkv; }
  int64_t kv(int64_t b) const { return (b / hq) * hkv + (b % hq) / group(); }
  int64_t first_q(int64_t c) const { return (c / hkv) * hq + (c % hkv) * group(); }  // of kv matrix c
};

// Keys query i of a block sees: all S, or (causal) keys 0..i.
inline int64_t visible(int64_t i, int64_t S, bool causal) { return causal ? std::min(S, i + 1) : S; }

// Banded attention's first key of query i of q's matrix b (0 without a band): first is [Bf, L]
// over the sequences (q's dims before the heads), Bf 1 when every sequence shares it.
struct Band {
  const int32_t* first = nullptr;
  int64_t sb = 0, hq = 1;
  Band(const Tensor& f, const HeadMap& heads) : hq(heads.hq) {
    if (!f.defined()) return;
    first = f.data_ptr<int32_t>();
    sb = f.shape()[0] == 1 ? 0 : f.shape()[1];
  }
  int64_t operator()(int64_t b, int64_t i) const { return first ? first[(b / hq) * sb + i] : 0; }
};

template <class T>
void forward_typed(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                   bool causal, double scale_d, const Tensor& first, const Tensor& mask, const Tensor& sinks) {
  using A = acc_t<T>;
  const int64_t n = q.dim(), L = q.shape()[n - 2], S = k.shape()[n - 2], E = q.shape()[n - 1],
                Ev = v.shape()[n - 1];
  const Operand<T> Q(q), K(k), V(v), O(out);
  const Operand<bool> M(mask);
  const int64_t BH = static_cast<int64_t>(Q.off.size());
  const HeadMap heads(q, k);
  const Band band(first, heads);
  A* plse = lse.data_ptr<A>();
  const T scale = static_cast<T>(scale_d);
  const int64_t blocks = (L + kBlockQ - 1) / kBlockQ;
  const T* psink = sinks.defined() ? sinks.data_ptr<T>() : nullptr;
  // matrix b's sink: one more score of every row (-inf: none)
  auto sink_of = [&](int64_t b) { return psink ? psink[b % heads.hq] : -std::numeric_limits<T>::infinity(); };
  if (S == 0) {  // softmax over no keys: an empty sum (PyTorch gives zeros too)
    for (int64_t b = 0; b < BH; ++b) {
      O.rows(b, 0, L, Ev).setZero();
      std::fill(plse + b * L, plse + (b + 1) * L, static_cast<A>(sink_of(b)));
    }
    return;
  }
  parallel_for(0, BH * blocks, 1, [&](int64_t u0, int64_t u1) {
    Mat<T> P(kBlockQ, S);  // this thread's scores / probabilities of one block
    std::vector<T> inv(kBlockQ);
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / blocks, c = heads.kv(b), i0 = (u % blocks) * kBlockQ, m = std::min(kBlockQ, L - i0);
      // Keys [k0, nk): from the block's first query's first key (the band only moves forward) to
      // the last query's last. P's columns are keys from k0.
      const int64_t k0 = band(b, i0), nk = std::max(k0, visible(i0 + m - 1, S, causal)), w = nk - k0;
      auto Ob = O.rows(b, i0, m, Ev);
      auto Pb = P.topLeftCorner(m, w);
      Pb.noalias() = Q.crows(b, i0, m, E) * K.crows(c, k0, w, E).transpose();
      for (int64_t r = 0; r < m; ++r) {
        T* p = P.data() + r * S;
        const int64_t lo = std::min(band(b, i0 + r) - k0, w), vis = std::max(lo, visible(i0 + r, S, causal) - k0);
        std::fill(p, p + lo, T(0));    // before the row's band
        std::fill(p + vis, p + w, T(0));  // the masked keys of the diagonal block
        for (int64_t j = lo; j < vis; ++j) p[j] *= scale;
        if (M) {
          const bool* keep = M.row(b, i0 + r) + k0;
          for (int64_t j = lo; j < vis; ++j) p[j] = keep[j] ? p[j] : -std::numeric_limits<T>::infinity();
        }
        const T sink = sink_of(b);
        const T mx = std::max(vis > lo ? Vec<T>(p + lo, vis - lo).maxCoeff() : -std::numeric_limits<T>::infinity(), sink);
        if (mx == -std::numeric_limits<T>::infinity()) {  // every key masked out (or none left): a zero row
          std::fill(p + lo, p + vis, T(0));
          inv[r] = T(0);
          plse[b * L + i0 + r] = -std::numeric_limits<A>::infinity();
          continue;
        }
        for (int64_t j = lo; j < vis; ++j) p[j] = exp_of(p[j] - mx);  // a masked key: exp(-inf) = 0
        const T sum = Vec<T>(p + lo, vis - lo).sum() + (psink ? exp_of(sink - mx) : T(0));
        inv[r] = T(1) / sum;
        plse[b * L + i0 + r] = static_cast<A>(mx + std::log(sum));
      }
      Ob.noalias() = Pb * V.crows(c, k0, w, Ev);
      for (int64_t r = 0; r < m; ++r) Ob.row(r) *= inv[r];
    }
  });
}

template <class T>
void backward_typed(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                    const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& delta,
                    bool causal, double scale_d, const Tensor& first, const Tensor& mask) {
  using A = acc_t<T>;
  const int64_t n = q.dim(), L = q.shape()[n - 2], S = k.shape()[n - 2], E = q.shape()[n - 1],
                Ev = dout.shape()[n - 1];
  const Operand<T> Q(q), K(k), V(v), O(out), dO(dout), dQ(dq), dK(dk), dV(dv);
  const Operand<bool> M(mask);
  const int64_t BKV = static_cast<int64_t>(K.off.size());
  const HeadMap heads(q, k);
  const Band band(first, heads);
  const A* plse = lse.data_ptr<A>();
  const T scale = static_cast<T>(scale_d);
  const bool want_ds = dQ || dK;  // dP and dS are needed only for dq and dk
  A* pdelta = want_ds ? delta.data_ptr<A>() : nullptr;
  parallel_for(0, BKV, 1, [&](int64_t c0, int64_t c1) {
    Mat<T> P(kBlockQ, S), dP(want_ds ? kBlockQ : 0, S);
    for (int64_t c = c0; c < c1; ++c) {
      if (dK) dK.rows(c, 0, S, E).setZero();
      if (dV) dV.rows(c, 0, S, Ev).setZero();
      for (int64_t b = heads.first_q(c); b < heads.first_q(c) + heads.group(); ++b) {
        A* D = pdelta ? pdelta + b * L : nullptr;
        if (want_ds)  // D_i = sum_e dO[i, e] O[i, e] = sum_j P[i, j] dP[i, j]
          for (int64_t i = 0; i < L; ++i) {
            const T *g = dO.row(b, i), *o = O.row(b, i);
            T acc = 0;
            for (int64_t e = 0; e < Ev; ++e) acc += g[e] * o[e];
            D[i] = acc;
          }
        if (S == 0) {
          if (dQ) dQ.rows(b, 0, L, E).setZero();
          continue;
        }
        for (int64_t i0 = 0; i0 < L; i0 += kBlockQ) {
          const int64_t m = std::min(kBlockQ, L - i0);
          const int64_t k0 = band(b, i0), nk = std::max(k0, visible(i0 + m - 1, S, causal)), w = nk - k0;  // as forward's
          const auto Qb = Q.crows(b, i0, m, E);
          const auto Kb = K.crows(c, k0, w, E);
          const auto dOb = dO.crows(b, i0, m, Ev);
          auto Pb = P.topLeftCorner(m, w);
          Pb.noalias() = Qb * Kb.transpose();
          for (int64_t r = 0; r < m; ++r) {
            T* p = P.data() + r * S;
            const int64_t lo = std::min(band(b, i0 + r) - k0, w), vis = std::max(lo, visible(i0 + r, S, causal) - k0);
            const T l = static_cast<T>(plse[b * L + i0 + r]);
            for (int64_t j = lo; j < vis; ++j) p[j] = exp_of(p[j] * scale - l);
            if (M) {  // a masked key has P = 0 (in a zero row, lse = -inf made every exp inf)
              const bool* keep = M.row(b, i0 + r) + k0;
              for (int64_t j = lo; j < vis; ++j) p[j] = keep[j] ? p[j] : T(0);
            }
            std::fill(p, p + lo, T(0));
            std::fill(p + vis, p + w, T(0));
          }
          if (dV) dV.rows(c, k0, w, Ev).noalias() += Pb.transpose() * dOb;
          if (!want_ds) continue;
          auto dPb = dP.topLeftCorner(m, w);
          dPb.noalias() = dOb * V.crows(c, k0, w, Ev).transpose();
          for (int64_t r = 0; r < m; ++r) {  // dS, in place of dP
            T* ds = dP.data() + r * S;
            const T* p = P.data() + r * S;
            const T d = static_cast<T>(D[i0 + r]);
            for (int64_t j = 0; j < w; ++j) ds[j] = p[j] * (ds[j] - d) * scale;
          }
          if (dQ) dQ.rows(b, i0, m, E).noalias() = dPb * Kb;
          if (dK) dK.rows(c, k0, w, E).noalias() += dPb.transpose() * Qb;
        }
      }
    }
  });
}

}  // namespace

void sdpa_band(const Tensor& first, const Tensor& position_ids, int64_t window) {
  const int64_t rows = first.shape()[0], L = first.shape()[1];
  int32_t* f = first.data_ptr<int32_t>();
  const int64_t* pos = position_ids.defined() ? position_ids.data_ptr<int64_t>() : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t run = 0;  // the largest first key so far: at most i, since each query's is
    for (int64_t i = 0; i < L; ++i) {
      int64_t lo = 0;
      if (pos) {  // i - position, without overflow for any int64 position
        const int64_t p = pos[r * L + i];
        lo = p <= 0 ? i : p >= i ? 0 : i - p;
      }
      if (window > 0) lo = std::max(lo, i - window + 1);
      run = std::max(run, lo);
      f[r * L + i] = static_cast<int32_t>(run);
    }
  }
}

void sdpa_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool causal, double scale, const Tensor& first, const Tensor& mask, const Tensor& sinks) {
  switch (q.dtype()) {
    case kFloat32: return forward_typed<float>(out, lse, q, k, v, causal, scale, first, mask, sinks);
    case kFloat64: return forward_typed<double>(out, lse, q, k, v, causal, scale, first, mask, sinks);
    default: fail("scaled_dot_product_attention", "the fused CPU kernel wants float32 or float64, got ", q.dtype());
  }
}

void sdpa_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& delta,
                   bool causal, double scale, const Tensor& first, const Tensor& mask) {
  switch (q.dtype()) {
    case kFloat32: return backward_typed<float>(dq, dk, dv, dout, q, k, v, out, lse, delta, causal, scale, first, mask);
    case kFloat64: return backward_typed<double>(dq, dk, dv, dout, q, k, v, out, lse, delta, causal, scale, first, mask);
    default: fail("scaled_dot_product_attention", "the fused CPU kernel wants float32 or float64, got ", q.dtype());
  }
}

void sdpa_decode(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                 const Tensor& mask) {
  Shape lse_shape(q.shape().begin(), q.shape().end() - 1);
  const Tensor lse = Tensor::empty(lse_shape, {q.dtype() == kFloat64 ? kFloat64 : kFloat32, q.device()});
  sdpa_forward(out, lse, q, k, v, false, scale, Tensor(), mask);
}

}  // namespace tg::cpu
