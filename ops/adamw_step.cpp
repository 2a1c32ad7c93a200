#include "ops/adamw_step.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/adamw_step_kernels.h"
#include "ops/dispatch.h"

namespace tg {
namespace {

constexpr const char* kOp = "adamw_step_";

// bfloat16 parameters keep their moments in float32: (1 - b2) g^2 is far below a bfloat16 ulp
// of v, so a bfloat16 v would stop moving.
DType moment_dtype(DType param) { return param == kBFloat16 ? kFloat32 : param; }

void check_entry(size_t i, const AdamWParamStep& e) {
  const Tensor& p = e.param;
  TG_CHECK(p.defined(), kOp, "entry ", i, ": the parameter is undefined");
  const DType dt = p.dtype();
  TG_CHECK(dt == kFloat32 || dt == kBFloat16 || (dt == kFloat64 && p.device().is_cpu()), kOp, "entry ", i,
           ": the parameter is ", dt, " on ", p.device(), ", wants float32 or bfloat16 (or float64 on the CPU)");
  const std::pair<const char*, const Tensor*> others[] = {
      {"grad", &e.grad}, {"exp_avg", &e.exp_avg}, {"exp_avg_sq", &e.exp_avg_sq}};
  for (const auto& [name, t] : others) {
    const DType want = t == &e.grad ? dt : moment_dtype(dt);
    TG_CHECK(t->defined() && t->shape() == p.shape() && t->dtype() == want && t->device() == p.device(), kOp,
             "entry ", i, ": ", name, " is ",
             t->defined() ? shape_str(t->shape()) + " " + dtype_name(t->dtype()) + " " + t->device().str()
                          : std::string("undefined"),
             ", wants ", p.shape(), " ", want, " ", p.device(), " (the parameter is ", dt, ")");
  }
  TG_CHECK(e.exp_avg.is_contiguous() && e.exp_avg_sq.is_contiguous(), kOp, "entry ", i,
           ": exp_avg and exp_avg_sq must be contiguous");
  TG_CHECK(std::isfinite(e.lr) && e.lr >= 0 && std::isfinite(e.weight_decay) && e.weight_decay >= 0, kOp, "entry ",
           i, ": lr and weight_decay must be finite and >= 0, got ", e.lr, " and ", e.weight_decay);
  TG_CHECK(e.step >= 1, kOp, "entry ", i, ": step must be >= 1 (the step being taken), got ", e.step);
}

struct Bucket {  // one kernel call: slots of one device and parameter dtype
  Device device;
  DType dtype;
  std::vector<AdamWSlot> slots;
};

}  // namespace

void adamw_step_(const std::vector<AdamWParamStep>& params, double beta1, double beta2, double eps) {
  TG_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1 && eps >= 0, kOp,
           "wants betas in [0, 1) and eps >= 0, got (", beta1, ", ", beta2, ") and ", eps);
  for (size_t i = 0; i < params.size(); ++i) check_entry(i, params[i]);
  for (const AdamWParamStep& e : params)
    for (const Tensor* w : {&e.param, &e.exp_avg, &e.exp_avg_sq}) detail::check_writable(kOp, *w);

  NoGradGuard no_grad;  // the internal copies below
  std::vector<Bucket> buckets;
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (non-contiguous parameter, its updated copy)
  for (const AdamWParamStep& e : params) {
    for (const Tensor* w : {&e.param, &e.exp_avg, &e.exp_avg_sq}) w->bump_version();
    if (e.param.numel() == 0) continue;
    Tensor p = e.param, g = e.grad;
    if (!p.is_contiguous()) {
      p = clone_data(p);
      write_back.emplace_back(e.param, p);
    }
    // The CPU kernel reads a chunk of g again after writing that chunk of m: g must be its own memory.
    if (!g.is_contiguous() || g.shares_storage_with(e.param) || g.shares_storage_with(e.exp_avg) ||
        g.shares_storage_with(e.exp_avg_sq))
      g = clone_data(g);
    const double t = static_cast<double>(e.step);
    const AdamWScale<double> scale{1.0 - e.lr * e.weight_decay, e.lr / (1.0 - std::pow(beta1, t)),
                                   1.0 / std::sqrt(1.0 - std::pow(beta2, t))};
    auto b = std::find_if(buckets.begin(), buckets.end(),
                          [&](const Bucket& x) { return x.device == p.device() && x.dtype == p.dtype(); });
    if (b == buckets.end()) b = buckets.insert(buckets.end(), Bucket{p.device(), p.dtype(), {}});
    b->slots.push_back({p, g, e.exp_avg, e.exp_avg_sq, scale});
  }
  const AdamWHyper<double> hyper{1.0 - beta1, beta2, 1.0 - beta2, eps};
  for (const Bucket& b : buckets) {
    if (b.device.is_cpu()) KernelTrace::record("adamw_step.fused_cpu");
    TG_DISPATCH(b.device, adamw_step, b.slots, hyper);
  }
  for (const auto& [param, updated] : write_back) copy_(param, updated);
}

}  // namespace tg
