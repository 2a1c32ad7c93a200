// Online softmax statistics (Milakov & Gimelshein, "Online normalizer calculation for softmax",
// 2018), shared by the CPU and CUDA kernels of softmax, log_softmax and cross_entropy.
//
// One pass over a row keeps the running max m and s = sum exp(x - m); a new maximum rescales s
// instead of needing a separate max pass. Two partial states (from two threads, or two halves of
// a row) merge the same way. Then softmax(x) = exp(x - m) / s and logsumexp(x) = m + log(s).
//
// Edge cases follow PyTorch: a row that is all -inf has s = 0, so softmax gives nan (0/0); a nan
// anywhere in the row makes s nan and so the whole row nan. m itself never becomes nan.
#pragma once

#include <cmath>
#include <limits>

#include "core/bfloat16.h"  // TG_HOST_DEVICE

namespace tg {

template <class A>
struct OnlineSoftmax {
  A m = -std::numeric_limits<A>::infinity();
  A s = A(0);

  TG_HOST_DEVICE void add(A v) {
    if (v > m) {
      s = s * std::exp(m - v) + A(1);  // m = -inf on the first finite value: s * 0 + 1
      m = v;
    } else if (v != -std::numeric_limits<A>::infinity()) {
      s += std::exp(v - m);  // a nan v lands here and poisons s, as it should
    }
  }

  TG_HOST_DEVICE void merge(A om, A os) {
    A nm = om > m ? om : m;
    if (nm == -std::numeric_limits<A>::infinity()) {  // both sides saw only -inf: no rescale
      s += os;
      return;
    }
    s = s * std::exp(m - nm) + os * std::exp(om - nm);
    m = nm;
  }

  TG_HOST_DEVICE A logsumexp() const { return m + std::log(s); }
};

}  // namespace tg
