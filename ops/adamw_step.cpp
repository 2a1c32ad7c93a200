#include "ops/adamw_step.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/adamw_step_kernels.h"
#include "ops/detail/dispatch.h"
#include "ops/shape.h"

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
  TG_CHECK(e.counters.defined() == e.lr_wd.defined(), kOp, "entry ", i,
           ": counters and lr_wd come together (one is undefined)");
  if (e.counters.defined()) {
    for (const auto& [name, t, n] : {std::tuple{"counters", &e.counters, 4}, std::tuple{"lr_wd", &e.lr_wd, 2}})
      TG_CHECK(t->dtype() == kFloat64 && t->shape() == Shape{n} && t->is_contiguous() && t->device() == p.device(),
               kOp, "entry ", i, ": ", name, " is ", t->shape(), " ", t->dtype(), " on ", t->device(), ", wants [",
               n, "] float64 contiguous on ", p.device());
    return;  // their values are on the device: AdamW checks the lr it uploads
  }
  TG_CHECK(std::isfinite(e.lr) && e.lr >= 0 && std::isfinite(e.weight_decay) && e.weight_decay >= 0, kOp, "entry ",
           i, ": lr and weight_decay must be finite and >= 0, got ", e.lr, " and ", e.weight_decay);
  TG_CHECK(e.step >= 1, kOp, "entry ", i, ": step must be >= 1 (the step being taken), got ", e.step);
}

// Host numbers as the tensors the CUDA kernel reads: counters {step - 1, ...} and {lr, wd} per slot,
// in two uploads for all of them.
void upload_host_scalars(std::vector<AdamWSlot*>& slots, const std::vector<const AdamWParamStep*>& entries,
                         Device device) {
  std::vector<double> counters, lr_wd;
  for (const AdamWParamStep* e : entries) {
    counters.insert(counters.end(), {static_cast<double>(e->step - 1), 0, 0, 0});
    lr_wd.insert(lr_wd.end(), {e->lr, e->weight_decay});
  }
  const int64_t n = static_cast<int64_t>(entries.size());
  const Tensor c = from_vector(counters, {n, 4}, device), h = from_vector(lr_wd, {n, 2}, device);
  for (int64_t k = 0; k < n; ++k) {
    slots[k]->counters = reshape(slice(c, 0, k, k + 1), {4});
    slots[k]->lr_wd = reshape(slice(h, 0, k, k + 1), {2});
  }
}

struct Bucket {  // one kernel call: slots of one device and parameter dtype
  Device device;
  DType dtype;
  std::vector<AdamWSlot> slots;
  std::vector<const AdamWParamStep*> host_scalars;  // GPU entries given host numbers, in slot order
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
    auto b = std::find_if(buckets.begin(), buckets.end(),
                          [&](const Bucket& x) { return x.device == p.device() && x.dtype == p.dtype(); });
    if (b == buckets.end()) b = buckets.insert(buckets.end(), Bucket{p.device(), p.dtype(), {}, {}});
    AdamWSlot slot{p, g, e.exp_avg, e.exp_avg_sq, {}, e.counters, e.lr_wd};
    if (p.device().is_cpu()) {
      if (e.counters.defined()) {  // the CPU's "device" memory is the host's: as the CUDA kernel does
        double* c = e.counters.data_ptr<double>();
        const double* h = e.lr_wd.data_ptr<double>();
        slot.scale = adamw_scale(h[0], h[1], c[0] + 1, beta1, beta2);
        c[0] += 1, c[1] = slot.scale.decay, c[2] = slot.scale.step_size, c[3] = slot.scale.inv_sqrt_bc2;
      } else {
        slot.scale = adamw_scale(e.lr, e.weight_decay, static_cast<double>(e.step), beta1, beta2);
      }
    }
    b->slots.push_back(slot);
    if (!p.device().is_cpu() && !e.counters.defined()) b->host_scalars.push_back(&e);
  }
  const AdamWHyper<double> hyper{1.0 - beta1, beta2, 1.0 - beta2, eps, beta1};
  for (Bucket& b : buckets) {
    if (!b.host_scalars.empty()) {
      std::vector<AdamWSlot*> missing;
      for (AdamWSlot& s : b.slots)
        if (!s.counters.defined()) missing.push_back(&s);
      upload_host_scalars(missing, b.host_scalars, b.device);
    }
    if (b.device.is_cpu()) KernelTrace::record("adamw_step.fused_cpu");
    TG_DISPATCH(b.device, adamw_step, b.slots, hyper);
  }
  for (const auto& [param, updated] : write_back) copy_(param, updated);
}

}  // namespace tg
