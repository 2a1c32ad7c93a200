// The fused AdamW step on the CPU: every tensor of a step in one parallel loop over
// 1024-element chunks (most single tensors of a small model are too short to split on their
// own). Each chunk reads p, g, m, v once and writes p, m, v once (28 bytes per float32 element,
// 56 per float64, 22 per bfloat16 with float32 moments), where the tensor-op composition made a
// dozen temporaries and passes. Eigen array expressions, because its sqrt vectorises (a plain
// loop calling std::sqrt does not: GCC keeps the scalar errno path without -fno-math-errno).
#include "ops/cpu/eigen.h"

#include <algorithm>

#include "core/bfloat16.h"
#include "core/parallel.h"
#include "ops/adamw_step_kernels.h"

namespace tg::cpu {
namespace {

constexpr int64_t kChunk = 1024;

template <class T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;

template <class S>
AdamWHyper<S> cast(const AdamWHyper<double>& h) {
  return {static_cast<S>(h.one_minus_beta1), static_cast<S>(h.beta2), static_cast<S>(h.one_minus_beta2),
          static_cast<S>(h.eps), static_cast<S>(h.beta1)};
}
template <class S>
AdamWScale<S> cast(const AdamWScale<double>& s) {
  return {static_cast<S>(s.decay), static_cast<S>(s.step_size), static_cast<S>(s.inv_sqrt_bc2)};
}

// Elements [i0, i0 + len) of one slot; T is the parameter's type, S the moments' (and the math's).
template <class T, class S>
void update_chunk(const AdamWSlot& slot, const AdamWHyper<double>& hyper, int64_t i0, int64_t len) {
  Eigen::Map<Arr<S>> M(slot.exp_avg.data_ptr<S>() + i0, len), V(slot.exp_avg_sq.data_ptr<S>() + i0, len);
  const AdamWHyper<S> h = cast<S>(hyper);
  const AdamWScale<S> s = cast<S>(slot.scale);
  T* p = slot.param.data_ptr<T>() + i0;
  const T* g = slot.grad.data_ptr<T>() + i0;
  if constexpr (std::is_same_v<T, S>) {
    Eigen::Map<Arr<S>> P(p, len);
    Eigen::Map<const Arr<S>> G(g, len);
    adamw_update(P, M, V, G, h, s);
  } else {  // bfloat16 p and g: the chunk in float32, rounded back to nearest even
    S pf[kChunk], gf[kChunk];
    for (int64_t i = 0; i < len; ++i) pf[i] = static_cast<S>(p[i]), gf[i] = static_cast<S>(g[i]);
    Eigen::Map<Arr<S>> P(pf, len);
    Eigen::Map<const Arr<S>> G(gf, len);
    adamw_update(P, M, V, G, h, s);
    for (int64_t i = 0; i < len; ++i) p[i] = T(pf[i]);
  }
}

int64_t chunks_of(const AdamWSlot& s) { return (s.param.numel() + kChunk - 1) / kChunk; }

}  // namespace

void adamw_step(const std::vector<AdamWSlot>& slots, const AdamWHyper<double>& hyper) {
  std::vector<int64_t> first_chunk;  // of each slot, in the step's list of chunks
  int64_t chunks = 0;
  for (const AdamWSlot& s : slots) first_chunk.push_back(chunks), chunks += chunks_of(s);
  const DType dt = slots.empty() ? kFloat32 : slots[0].param.dtype();
  parallel_for(0, chunks, std::max<int64_t>(1, kParallelGrain / kChunk), [&](int64_t lo, int64_t hi) {
    // the slot holding chunk lo: the last one that starts at or before it
    size_t j = static_cast<size_t>(std::upper_bound(first_chunk.begin(), first_chunk.end(), lo) -
                                   first_chunk.begin()) - 1;
    for (int64_t c = lo; c < hi; ++c) {
      while (c >= first_chunk[j] + chunks_of(slots[j])) ++j;
      const AdamWSlot& s = slots[j];
      const int64_t i0 = (c - first_chunk[j]) * kChunk, len = std::min(kChunk, s.param.numel() - i0);
      if (dt == kFloat32) update_chunk<float, float>(s, hyper, i0, len);
      else if (dt == kFloat64) update_chunk<double, double>(s, hyper, i0, len);
      else update_chunk<bf16, float>(s, hyper, i0, len);
    }
  });
}

}  // namespace tg::cpu
