// gradcheck: compares the gradients backward computes with central finite differences, in
// float64 on the CPU, like torch.autograd.gradcheck. For users testing their own modules:
//
//   auto r = tg::testing::gradcheck([&] { return block.forward(x); }, {x, block.w1.weight});
//   EXPECT_TRUE(r.ok) << r.report;
//
// `fn` must rebuild its output from the tensors in `wrt` each call (it is called 2 * numel
// times per tensor). Every tensor in `wrt` must be a float64 CPU leaf that requires grad. The
// output is reduced to a scalar by a fixed random projection, so every output element counts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg::testing {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-6;  // pass when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-4;
  uint64_t seed = 1234;  // of the output projection
};

struct GradcheckResult {
  bool ok = true;
  std::string report;  // the worst element of each tensor: index, analytic and numeric values
  double max_abs_error = 0;
};

GradcheckResult gradcheck(const std::function<Tensor()>& fn, const std::vector<Tensor>& wrt,
                          GradcheckOptions opts = {});

// The multi-index of row-major element i of `shape` as text, e.g. "[1, 2]" (what the reports name).
std::string index_str(const Shape& shape, int64_t i);

}  // namespace tg::testing
