// A model's KV-cached forward against its full forward, for the family tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/generation/kv_cache.h"
#include "nn/models/causal_lm.h"
#include "ops/shape.h"
#include "testing/testing.h"

namespace tg::test {

// `model`'s cached forward over `seqs` (the second left-padded by pad[1]) in steps of `steps`
// tokens gives each sequence the logits of its full forward.
inline void expect_cached_matches_full(nn::CausalLM& model, const std::vector<std::vector<int64_t>>& seqs,
                                       const std::vector<int64_t>& pad, const std::vector<int64_t>& steps) {
  const nn::ModelDims d = model.dims();
  NoGradGuard no_grad;
  int64_t columns = 0;
  for (int64_t T : steps) columns += T;
  nn::KVCache cache(d.num_layers, 2, d.kv_heads, d.head_dim, columns, {kFloat32}, pad);
  int64_t col = 0;
  for (int64_t T : steps) {
    std::vector<int64_t> ids;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = col; c < col + T; ++c) ids.push_back(c < pad[b] ? 0 : seqs[b][c - pad[b]]);
    Tensor logits = model.logits(model.hidden_states(from_vector(ids, {2, T}), cache));
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t first = std::max(col, pad[b]);
      if (first >= col + T) continue;
      const int64_t n = col + T - pad[b];  // the sequence's tokens so far
      Tensor full = model.forward(from_vector(std::vector<int64_t>(seqs[b].begin(), seqs[b].begin() + n), {1, n}));
      EXPECT_TENSOR_NEAR(slice(slice(logits, 0, b, b + 1), 1, first - col, T), slice(full, 1, first - pad[b], n),
                         2e-5, 2e-5)
          << "step of " << T << " at column " << col << ", sequence " << b;
    }
    col += T;
  }
}

}  // namespace tg::test
