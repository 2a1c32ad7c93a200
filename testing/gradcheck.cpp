#include "testing/gradcheck.h"

#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/factory.h"
#include "ops/binary.h"
#include "ops/reduce.h"

namespace tg::testing {
namespace {

// Storage offset of row-major element i of t (t may be a strided view).
int64_t offset_of(const Tensor& t, int64_t i) {
  int64_t off = t.storage_offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.shape()[d]) * t.strides()[d];
    i /= t.shape()[d];
  }
  return off;
}

}  // namespace

std::string index_str(const Shape& shape, int64_t i) {
  Shape idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return detail::to_text(idx);
}

GradcheckResult gradcheck(const std::function<Tensor()>& fn, const std::vector<Tensor>& wrt,
                          GradcheckOptions opts) {
  for (const Tensor& t : wrt)
    TG_CHECK(t.defined() && t.dtype() == kFloat64 && t.device().is_cpu() && t.is_leaf() && t.requires_grad(),
             "gradcheck", "every checked tensor must be a float64 CPU leaf that requires grad, got ",
             t.defined() ? t.shape() : Shape{}, " ", t.defined() ? dtype_name(t.dtype()) : "undefined");
  Tensor out = fn();
  TG_CHECK(out.dtype() == kFloat64, "gradcheck", "fn returned ", out.dtype(), "; run it in float64");
  Generator gen(opts.seed);
  Tensor proj = randn(out.shape(), gen, {kFloat64});
  auto loss_of = [&](const Tensor& o) { return sum(mul(o, proj)); };

  for (const Tensor& t : wrt) t.set_grad({});
  loss_of(out).backward();

  GradcheckResult result;
  std::ostringstream report;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const Tensor& t = wrt[k];
    Tensor analytic = t.grad();
    std::vector<double> a = analytic.defined() ? analytic.to_vector<double>() : std::vector<double>(t.numel(), 0.0);
    double* data = static_cast<double*>(t.storage()->data());
    double worst = -1;
    int64_t worst_i = 0;
    double worst_a = 0, worst_n = 0;
    bool ok = true;
    for (int64_t i = 0; i < t.numel(); ++i) {
      double& x = data[offset_of(t, i)];
      const double x0 = x;
      double lp, lm;
      {
        NoGradGuard g;
        x = x0 + opts.eps;
        lp = loss_of(fn()).item<double>();
        x = x0 - opts.eps;
        lm = loss_of(fn()).item<double>();
        x = x0;
      }
      double numeric = (lp - lm) / (2 * opts.eps);
      double err = std::abs(a[i] - numeric);
      double excess = err - (opts.atol + opts.rtol * std::abs(numeric));
      if (excess > 0 || std::isnan(a[i])) ok = false;
      if (excess > worst || std::isnan(a[i])) worst = excess, worst_i = i, worst_a = a[i], worst_n = numeric;
      result.max_abs_error = std::max(result.max_abs_error, err);
    }
    if (!ok) {
      result.ok = false;
      report << "tensor " << k << " (shape " << shape_str(t.shape()) << "): worst element "
             << index_str(t.shape(), worst_i) << " analytic " << worst_a << " numeric " << worst_n
             << " (|diff| " << std::abs(worst_a - worst_n) << ")\n";
    }
  }
  result.report = result.ok ? "ok" : report.str();
  return result;
}

}  // namespace tg::testing
