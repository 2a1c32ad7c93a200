// Op cases: softmax, log_softmax, cross_entropy, linear_cross_entropy, embedding, masked_fill, dropout.
#include <limits>

#include "core/factory.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/linear_cross_entropy.h"
#include "ops/masked_fill.h"
#include "ops/softmax.h"
#include "tests/op_harness.h"

namespace tg::test {
namespace {

using S = InputSpec;
const S kOdd{{7, 33}};                            // odd sizes, not a multiple of any vector width
const S kStrided{{6, 9}, S::Normal, 0, true, true};  // a transposed (non-contiguous) view
const S kTargets{{7}, S::Index, 33};                 // classes for kOdd's rows

// `targets` with every third entry (rows 0, 3, 6, ...) replaced by `ignore`, on the same device.
// A fixed pattern, so every call (gradcheck calls fn many times) ignores the same rows.
Tensor with_ignored(const Tensor& targets, int64_t ignore) {
  std::vector<int64_t> t = targets.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); i += 3) t[i] = ignore;
  return to(from_vector(t), targets.device());
}

// [T, T] int32 mask, 1 above the diagonal: the future positions attention must not see.
Tensor causal_mask(int64_t T, Device device) {
  std::vector<int32_t> m(static_cast<size_t>(T * T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) m[static_cast<size_t>(i * T + j)] = j > i;
  return to(from_vector(m, {T, T}), device);
}

TG_OP_CASES({
    // x [7, 5], weight [33, 5]: one chunk here (tests/test_linear_cross_entropy.cpp has several)
    {"linear_cross_entropy", {S{{7, 5}}, S{{33, 5}}, kTargets},
     [](const Inputs& x) { return linear_cross_entropy(x[0], x[1], with_ignored(x[2], -100)); }},
    // each row's loss (-log p of its target): the frozen weight's unit dx scaled row by row, the
    // trainable one's gradients from backward's second pass; the mask check holds their dx equal
    {"linear_cross_entropy_rows", {S{{7, 5}}, S{{33, 5}}, kTargets},
     [](const Inputs& x) { return linear_cross_entropy(x[0], x[1], with_ignored(x[2], -100), -100, Reduction::None); }},
    // softmax / log_softmax: rows (last dim), columns (an earlier dim), strided views, a row
    // longer than one CUDA warp handles, and a column tile wider than the CPU's 64.
    {"softmax_last", {kOdd}, [](const Inputs& x) { return softmax(x[0], -1); }},
    {"softmax_middle", {S{{3, 5, 4}}}, [](const Inputs& x) { return softmax(x[0], 1); }},
    {"softmax_first", {S{{6, 4}}}, [](const Inputs& x) { return softmax(x[0], 0); }},
    {"softmax_strided", {kStrided}, [](const Inputs& x) { return softmax(x[0], -1); }},
    {"softmax_long_row", {S{{3, 1500}}}, [](const Inputs& x) { return softmax(x[0], 1); }},
    {"softmax_wide_columns", {S{{2, 5, 130}}}, [](const Inputs& x) { return softmax(x[0], 1); }},
    {"log_softmax_last", {kOdd}, [](const Inputs& x) { return log_softmax(x[0], -1); }},
    {"log_softmax_middle", {S{{3, 5, 4}}}, [](const Inputs& x) { return log_softmax(x[0], -2); }},
    {"log_softmax_strided", {kStrided}, [](const Inputs& x) { return log_softmax(x[0], 0); }},
    // log_softmax values are ~ -8 here: the finite differences of a sum of 4200 of them carry
    // ~1e-6 of rounding noise, hence the looser atol.
    {"log_softmax_long_row", {S{{2, 2100}}}, [](const Inputs& x) { return log_softmax(x[0], -1); },
     /*fd_rtol=*/1e-5, /*fd_atol=*/1e-5},

    // cross_entropy: each reduction, with and without ignored rows, int32 targets, a vocabulary
    // long enough for the CUDA block-per-row path, a strided logits view.
    {"cross_entropy_mean", {kOdd, kTargets}, [](const Inputs& x) { return cross_entropy(x[0], x[1]); }},
    {"cross_entropy_sum", {kOdd, kTargets},
     [](const Inputs& x) { return cross_entropy(x[0], x[1], -100, Reduction::Sum); }},
    {"cross_entropy_none", {kOdd, kTargets},
     [](const Inputs& x) { return cross_entropy(x[0], x[1], -100, Reduction::None); }},
    {"cross_entropy_mean_ignored", {kOdd, kTargets},
     [](const Inputs& x) { return cross_entropy(x[0], with_ignored(x[1], -100)); }},
    {"cross_entropy_sum_ignored", {kOdd, kTargets},
     [](const Inputs& x) { return cross_entropy(x[0], with_ignored(x[1], -1), -1, Reduction::Sum); }},
    {"cross_entropy_none_ignored", {kOdd, kTargets},
     [](const Inputs& x) { return cross_entropy(x[0], with_ignored(x[1], -100), -100, Reduction::None); }},
    {"cross_entropy_int32_targets", {kOdd, kTargets},
     [](const Inputs& x) { return cross_entropy(x[0], to(x[1], kInt32)); }},
    {"cross_entropy_long_vocab", {S{{3, 2100}}, S{{3}, S::Index, 2100}},
     [](const Inputs& x) { return cross_entropy(x[0], x[1]); }},
    {"cross_entropy_strided_logits", {S{{9, 6}, S::Normal, 0, true, true}, S{{9}, S::Index, 6}},
     [](const Inputs& x) { return cross_entropy(x[0], x[1]); }},

    // embedding: random indices repeat rows (the scatter must add them up).
    {"embedding", {S{{10, 6}}, S{{3, 4}, S::Index, 10}},
     [](const Inputs& x) { return embedding(x[0], x[1]); }},
    {"embedding_strided_weight", {S{{10, 6}, S::Normal, 0, true, true}, S{{13}, S::Index, 10}},
     [](const Inputs& x) { return embedding(x[0], x[1]); }},
    {"embedding_int32_indices", {S{{12, 16}}, S{{2, 9}, S::Index, 12}},
     [](const Inputs& x) { return embedding(x[0], to(x[1], kInt32)); }},

    // masked_fill: a random bool mask broadcast over the batch, and the attention pattern
    // (causal int32 mask filled with -inf, then softmax).
    {"masked_fill_broadcast", {S{{3, 5, 5}}, S{{5, 5}, S::Mask}},
     [](const Inputs& x) { return masked_fill(x[0], x[1], 2.5); }},
    {"masked_fill_strided", {kStrided, S{{6, 1}, S::Mask}},
     [](const Inputs& x) { return masked_fill(x[0], x[1], -1.0); }},
    {"masked_fill_causal_softmax", {S{{2, 3, 6, 6}}},
     [](const Inputs& x) {
       return softmax(masked_fill(x[0], causal_mask(6, x[0].device()), -std::numeric_limits<double>::infinity()), -1);
     }},

    // dropout: a Generator made inside fn, so every call draws the same mask; the CPU and the
    // GPU must draw the same one for CudaMatchesCpu to pass.
    {"dropout", {kOdd},
     [](const Inputs& x) {
       Generator g(7);
       return dropout(x[0], 0.3, true, g);
     }},
    {"dropout_strided", {kStrided},
     [](const Inputs& x) {
       Generator g(11);
       return dropout(x[0], 0.5, true, g);
     }},
});

}  // namespace
}  // namespace tg::test
