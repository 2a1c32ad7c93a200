#include "testing/testing.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace tg::testing {
namespace {

::testing::AssertionResult mismatch_header(const char* got_expr, const char* want_expr, const Tensor& got,
                                           const Tensor& want) {
  if (!got.defined() || !want.defined())
    return ::testing::AssertionFailure() << got_expr << " or " << want_expr << " is undefined";
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << got_expr << " has shape " << shape_str(got.shape()) << ", "
                                         << want_expr << " has shape " << shape_str(want.shape());
  return ::testing::AssertionSuccess();
}

}  // namespace

::testing::AssertionResult tensors_near(const char* got_expr, const char* want_expr, const char*,
                                        const char*, const Tensor& got, const Tensor& want,
                                        double rtol, double atol) {
  if (auto h = mismatch_header(got_expr, want_expr, got, want); !h) return h;
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int64_t worst = -1, bad = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double excess = std::abs(g[i] - w[i]) - (atol + rtol * std::abs(w[i]));
    bool nan_mismatch = std::isnan(g[i]) != std::isnan(w[i]);
    if (excess > 0 || nan_mismatch) {
      ++bad;
      if (worst < 0 || excess > worst_excess || nan_mismatch) worst = static_cast<int64_t>(i), worst_excess = excess;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << got_expr << " differs from " << want_expr << " (shape " << shape_str(got.shape()) << ", rtol "
         << rtol << ", atol " << atol << "): " << bad << " of " << g.size() << " elements out of tolerance; worst at "
         << index_str(got.shape(), worst) << ": got " << g[worst] << ", want " << w[worst];
}

::testing::AssertionResult tensors_equal(const char* got_expr, const char* want_expr, const Tensor& got,
                                         const Tensor& want) {
  if (auto h = mismatch_header(got_expr, want_expr, got, want); !h) return h;
  if (got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << got_expr << " is " << got.dtype() << ", " << want_expr << " is "
                                         << want.dtype();
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i)
    if (std::memcmp(&g[i], &w[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << got_expr << " differs from " << want_expr << " at "
                                           << index_str(got.shape(), static_cast<int64_t>(i)) << ": got " << g[i]
                                           << ", want " << w[i] << " (bitwise equality wanted)";
  return ::testing::AssertionSuccess();
}

SeededTest::SeededTest() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "";
  uint64_t h = 1469598103934665603ull;  // FNV-1a: the same seed on every platform
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  gen.manual_seed(h);
}

bool cuda_ready() { return cuda_is_available(); }

}  // namespace tg::testing
