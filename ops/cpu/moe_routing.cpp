// The routing kernels on the CPU: topk by k passes over each row (k is small: 2 to 8 of 8 to 128
// experts), rows split across threads; sort_by_expert as one counting sort.
#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "core/detail/type_dispatch.h"
#include "ops/moe_routing_kernels.h"

namespace tg::cpu {

void topk(const Tensor& values, const Tensor& indices, const Tensor& x) {
  dispatch_floating(x.dtype(), "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const int64_t R = x.shape()[0], C = x.shape()[1], k = values.shape().back();
    const T* px = x.data_ptr<T>();
    T* pv = values.data_ptr<T>();
    int64_t* pi = indices.data_ptr<int64_t>();
    parallel_for(0, R, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C * k, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* row = px + r * C;
        int64_t prev = -1;  // the last pick: the next is the largest below it (or equal, at a higher index)
        for (int64_t j = 0; j < k; ++j) {
          int64_t best = -1;
          for (int64_t c = 0; c < C; ++c) {
            const A v = convert<A>(row[c]);
            if (prev >= 0) {
              const A p = convert<A>(row[prev]);
              if (v > p || (v == p && c <= prev)) continue;  // taken already
            }
            if (best < 0 || v > convert<A>(row[best])) best = c;
          }
          pv[r * k + j] = row[best];
          pi[r * k + j] = best;
          prev = best;
        }
      }
    });
  });
}

void topk_backward(const Tensor& dx, const Tensor& g, const Tensor& indices) {
  dispatch_floating(dx.dtype(), "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t R = dx.shape()[0], C = dx.shape()[1], k = g.shape()[1];
    T* pd = dx.data_ptr<T>();
    const T* pg = g.data_ptr<T>();
    const int64_t* pi = indices.data_ptr<int64_t>();
    std::fill(pd, pd + R * C, convert<T>(0.0));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < k; ++j) pd[r * C + pi[r * k + j]] = pg[r * k + j];
  });
}

void sort_by_expert(const Tensor& counts, const Tensor& token_of_row, const Tensor& row_of_choice,
                    const Tensor& indices) {
  const int64_t E = counts.numel(), n = indices.numel(), k = indices.shape()[1];
  const int64_t* pi = indices.data_ptr<int64_t>();
  int64_t* pc = counts.data_ptr<int64_t>();
  std::fill(pc, pc + E, 0);
  for (int64_t a = 0; a < n; ++a) {
    TG_CHECK(pi[a] >= 0 && pi[a] < E, "sort_by_expert", "expert id ", pi[a], " at choice ", a, " (token ", a / k,
             ") is out of range for ", E, " experts");
    ++pc[pi[a]];
  }
  std::vector<int64_t> next(static_cast<size_t>(E), 0);
  for (int64_t e = 1; e < E; ++e) next[e] = next[e - 1] + pc[e - 1];
  int64_t *pt = token_of_row.data_ptr<int64_t>(), *pr = row_of_choice.data_ptr<int64_t>();
  for (int64_t a = 0; a < n; ++a) {
    const int64_t row = next[pi[a]]++;
    pt[row] = a / k;
    pr[a] = row;
  }
}

}  // namespace tg::cpu
