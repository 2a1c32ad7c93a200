// CPU cross_entropy: rows split across threads. Forward reads each logit once (online softmax;
// float32 / bfloat16 rows twice, in L1, for the vectorised statistics of softmax_rows.h) and
// writes two numbers per row; backward reads each logit once more and writes dlogits, with
// fast_exp for float.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <limits>

#include "core/factory.h"
#include "core/detail/fast_exp.h"
#include "core/parallel.h"
#include "core/detail/type_dispatch.h"
#include "ops/cpu/softmax_rows.h"
#include "ops/cross_entropy_kernels.h"
#include "ops/softmax_math.h"

namespace tg::cpu {
namespace {

template <class A>
inline A exp_of(A x) {
  if constexpr (std::is_same_v<A, float>) return fast_exp(x);
  else return std::exp(x);
}

template <class T>
acc_t<T> row_logsumexp(const T* row, int64_t classes) {
  using A = acc_t<T>;
  if constexpr (std::is_same_v<A, float>) {
    const float m = row_max(row, classes);
    return m + std::log(row_sum_exp(row, classes, m));
  } else {
    OnlineSoftmax<A> st;
    for (int64_t j = 0; j < classes; ++j) st.add(convert<A>(row[j]));
    return st.logsumexp();
  }
}

template <class F>
void for_rows(int64_t rows, int64_t classes, F&& f) {
  parallel_for(0, rows, std::max<int64_t>(1, kParallelGrain / classes), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

}  // namespace

void cross_entropy(const Tensor& loss_rows, const Tensor& lse, const Tensor& logits,
                   const Tensor& targets, int64_t ignore_index) {
  dispatch_floating_index(logits.dtype(), targets.dtype(), "cross_entropy", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    using A = acc_t<T>;
    const T* px = logits.data_ptr<T>();
    const I* pt = targets.data_ptr<I>();
    A* pl = loss_rows.data_ptr<A>();
    A* ps = lse.data_ptr<A>();
    const int64_t classes = logits.shape()[1], ld = logits.strides()[0];
    for_rows(logits.shape()[0], classes, [&](int64_t i) {
      const T* row = px + i * ld;
      const A l = row_logsumexp(row, classes);
      const int64_t t = static_cast<int64_t>(pt[i]);
      ps[i] = l;
      if (t == ignore_index) pl[i] = A(0);
      else if (t < 0 || t >= classes) pl[i] = std::numeric_limits<A>::quiet_NaN();
      else pl[i] = l - convert<A>(row[t]);
    });
  });
}

void cross_entropy_reduce(const Tensor& out, const Tensor& count, const Tensor& loss_rows,
                          const Tensor& targets, int64_t ignore_index, bool mean) {
  dispatch_floating_index(out.dtype(), targets.dtype(), "cross_entropy", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    using A = acc_t<T>;
    const A* pl = loss_rows.data_ptr<A>();
    const I* pt = targets.data_ptr<I>();
    double sum = 0, n = 0;  // double: a long batch of float32 losses would lose digits
    for (int64_t i = 0, rows = loss_rows.numel(); i < rows; ++i) {
      sum += static_cast<double>(pl[i]);
      n += static_cast<int64_t>(pt[i]) != ignore_index;
    }
    // Mean over zero targets is 0/0 = nan, as in PyTorch.
    out.data_ptr<T>()[0] = convert<T>(mean ? sum / n : sum);
    if (count.defined()) count.data_ptr<A>()[0] = static_cast<A>(n);
  });
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& grad, const Tensor& lse,
                            const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                            const Tensor& count) {
  dispatch_floating_index(logits.dtype(), targets.dtype(), "cross_entropy", [&](auto tag, auto itag) {
    using T = typename decltype(tag)::type;
    using I = typename decltype(itag)::type;
    using A = acc_t<T>;
    const T* px = logits.data_ptr<T>();
    const T* pg = grad.data_ptr<T>();
    const I* pt = targets.data_ptr<I>();
    const A* ps = lse.data_ptr<A>();
    T* pd = dlogits.data_ptr<T>();
    const int64_t classes = logits.shape()[1], ld = logits.strides()[0];
    const int64_t gstep = grad.dim() == 0 ? 0 : 1;
    const A inv_count = count.defined() ? A(1) / count.data_ptr<A>()[0] : A(1);
    for_rows(logits.shape()[0], classes, [&](int64_t i) {
      const T* row = px + i * ld;
      T* drow = pd + i * classes;
      const int64_t t = static_cast<int64_t>(pt[i]);
      if (t == ignore_index || t < 0 || t >= classes) {
        std::fill(drow, drow + classes, convert<T>(0.0));
        return;
      }
      const A scale = convert<A>(pg[i * gstep]) * inv_count, l = ps[i], xt = convert<A>(row[t]);  // before
      for (int64_t j = 0; j < classes; ++j) drow[j] = convert<T>(scale * exp_of(convert<A>(row[j]) - l));  // in place
      drow[t] = convert<T>(scale * (exp_of(xt - l) - A(1)));
    });
  });
}

void cross_entropy_with_grad(const Tensor& loss_rows, const Tensor& lse, const Tensor& logits,
                             const Tensor& targets, int64_t ignore_index) {
  cross_entropy(loss_rows, lse, logits, targets, ignore_index);
  cross_entropy_backward(logits, full({}, 1.0, logits.options()), lse, logits, targets, ignore_index, Tensor());
}

}  // namespace tg::cpu
