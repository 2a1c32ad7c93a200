#include "ops/cpu/eigen.h"
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/primitives.h"
#include "core/type_dispatch.h"
#include "io/safetensors.h"
#include "ops/binary.h"
#include "ops/cast.h"

namespace tg::optim {
namespace {

std::string join(const std::vector<std::string>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + xs[i];
  return s;
}

// The parameter's gradient, checked against it; undefined when there is none.
Tensor grad_of(const char* op, const std::string& name, const Tensor& p) {
  Tensor g = p.grad();
  if (g.defined())
    TG_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype() && g.device() == p.device(), op, "gradient of '", name,
             "' (", g.shape(), " ", g.dtype(), " ", g.device(), ") does not match the parameter (", p.shape(), " ",
             p.dtype(), " ", p.device(), ")");
  return g;
}

}  // namespace

NamedParams name_by_index(const std::vector<Tensor>& params) {
  NamedParams out;
  for (size_t i = 0; i < params.size(); ++i) out.emplace_back(std::to_string(i), params[i]);
  return out;
}

Optimizer::Optimizer(std::string type, NamedParams params, double lr, std::vector<std::string> buffer_names)
    : buffer_names_(std::move(buffer_names)), type_(std::move(type)), params_(std::move(params)), lr_(lr) {
  set_lr(lr);
  std::set<const TensorImpl*> seen;
  std::set<std::string> names;
  for (const auto& [name, p] : params_) {
    TG_CHECK(p.defined(), type_.c_str(), "parameter '", name, "' is undefined");
    TG_CHECK(p.is_leaf() && is_floating_point(p.dtype()), type_.c_str(), "parameter '", name,
             "' must be a floating-point leaf tensor");
    TG_CHECK(seen.insert(&p.impl()).second, type_.c_str(), "parameter '", name, "' is given twice");
    TG_CHECK(names.insert(name).second, type_.c_str(), "two parameters are named '", name, "'");
  }
  state_.resize(params_.size());
}

void Optimizer::set_lr(double lr) {
  TG_CHECK(lr >= 0 && std::isfinite(lr), type_.c_str(), "lr must be finite and >= 0, got ", lr);
  lr_ = lr;
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.set_grad(Tensor());
}

Optimizer::ParamState& Optimizer::state_for(size_t i) {
  ParamState& s = state_[i];
  if (s.buffers.empty())
    for (size_t b = 0; b < buffer_names_.size(); ++b) s.buffers.push_back(zeros_like(params_[i].second));
  return s;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.buffers.empty()) continue;
    const std::string& name = params_[i].first;
    out[name + ".step"] = scalar_tensor(static_cast<double>(s.step), {.dtype = kInt64});
    for (size_t b = 0; b < buffer_names_.size(); ++b) out[name + "." + buffer_names_[b]] = s.buffers[b];
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  std::vector<std::string> problems;
  std::set<std::string> used;
  std::vector<ParamState> fresh(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    auto step = state.find(name + ".step");
    if (step == state.end()) {
      for (const auto& b : buffer_names_)
        if (state.count(name + "." + b)) problems.push_back("'" + name + "." + b + "' without '" + name + ".step'");
      continue;  // no state yet for this parameter
    }
    used.insert(step->first);
    if (step->second.numel() != 1 || is_floating_point(step->second.dtype())) {
      problems.push_back("'" + step->first + "' must be one integer");
      continue;
    }
    fresh[i].step = step->second.item<int64_t>();
    for (const auto& b : buffer_names_) {
      auto it = state.find(name + "." + b);
      if (it == state.end()) {
        problems.push_back("missing '" + name + "." + b + "'");
        continue;
      }
      used.insert(it->first);
      if (it->second.shape() != p.shape()) {
        problems.push_back("'" + it->first + "' has shape " + shape_str(it->second.shape()) + ", the parameter " +
                           shape_str(p.shape()));
        continue;
      }
      fresh[i].buffers.push_back(clone_data(to(it->second, p.dtype(), p.device())));
    }
  }
  for (const auto& [key, t] : state)
    if (!used.count(key)) problems.push_back("unexpected '" + key + "'");
  TG_CHECK(problems.empty(), "load_state_dict", type_, " state does not fit its parameters (", problems.size(),
           " problem(s)): ", join(problems));
  state_ = std::move(fresh);
}

void Optimizer::save(const std::string& path) const {
  std::ostringstream lr;
  lr.precision(17);
  lr << lr_;
  safetensors::save_file(state_dict(), path, {{"optimizer", type_}, {"lr", lr.str()}, {"format", "tapegrad"}});
}

void Optimizer::load(const std::string& path) {
  safetensors::Loaded f = safetensors::load_file_with_metadata(path);
  auto type = f.metadata.find("optimizer");
  TG_CHECK(type != f.metadata.end() && type->second == type_, "load", "'", path, "' holds ",
           type == f.metadata.end() ? std::string("no optimizer state") : type->second + " state", ", wants ", type_);
  load_state_dict(f.tensors);
  if (auto lr = f.metadata.find("lr"); lr != f.metadata.end()) {
    try {
      set_lr(std::stod(lr->second));
    } catch (const std::logic_error&) {
      fail("load", "'", path, "' has a bad lr '", lr->second, "'");
    }
  }
}

// ---------------------------------------------------------------- SGD

SGD::SGD(NamedParams params, SGDOptions o)
    : Optimizer("SGD", std::move(params), o.lr, o.momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                                                                 : std::vector<std::string>{}),
      options(o) {
  TG_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "SGD", "momentum and weight_decay must be >= 0");
  TG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD", "nesterov needs momentum > 0 and dampening 0");
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < named_params().size(); ++i) {
    const auto& [name, param] = named_params()[i];
    Tensor g = grad_of("SGD", name, param);
    if (!g.defined()) continue;
    Tensor p = param.detach();
    Tensor d = options.weight_decay != 0 ? add(g, mul(p, options.weight_decay)) : g;
    if (options.momentum != 0) {
      const bool first = state_[i].buffers.empty();
      ParamState& s = state_for(i);
      Tensor& buf = s.buffers[0];
      // The first step starts the buffer at d itself (torch: buf = clone(d_p)).
      copy_(buf, first ? d : add(mul(buf, options.momentum), mul(d, 1.0 - options.dampening)));
      d = options.nesterov ? add(d, mul(buf, options.momentum)) : buf;
      ++s.step;
    }
    copy_(p, sub(p, mul(d, lr())));
  }
}

// ---------------------------------------------------------------- AdamW

AdamW::AdamW(NamedParams params, AdamWOptions o)
    : Optimizer("AdamW", std::move(params), o.lr, {"exp_avg", "exp_avg_sq"}), options(o) {
  TG_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "AdamW", "betas must be in [0, 1), got (",
           o.beta1, ", ", o.beta2, ")");
  TG_CHECK(o.eps >= 0 && o.weight_decay >= 0, "AdamW", "eps and weight_decay must be >= 0");
}

namespace {

// The update below in one pass over contiguous CPU tensors (float32 / float64): the same
// per-element formula and scalar constants as the tensor-op composition, without its dozen
// temporaries and passes over memory (read p, g, m, v once, write p, m, v once). All such
// parameters of a step go through one parallel loop over 1024-element chunks (most single
// tensors of a small model are too short to split on their own). Eigen array expressions,
// because its sqrt vectorises (a plain loop calling std::sqrt does not: GCC keeps the scalar
// errno path without -fno-math-errno).
constexpr int64_t kAdamWChunk = 1024;

struct AdamWJob {
  DType dtype;
  void *p, *m, *v;
  const void* g;
  int64_t n, first_chunk;
  double keep, b1c, b2, b2c, inv_sqrt_bc2, eps, step;
};

template <class T>
void adamw_chunk(const AdamWJob& j, int64_t i0, int64_t len) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<Arr> P(static_cast<T*>(j.p) + i0, len), M(static_cast<T*>(j.m) + i0, len),
      V(static_cast<T*>(j.v) + i0, len);
  Eigen::Map<const Arr> G(static_cast<const T*>(j.g) + i0, len);
  const T keep = static_cast<T>(j.keep), b1c = static_cast<T>(j.b1c), b2 = static_cast<T>(j.b2),
          b2c = static_cast<T>(j.b2c), isq = static_cast<T>(j.inv_sqrt_bc2), eps = static_cast<T>(j.eps),
          step = static_cast<T>(j.step);
  M = M + (G - M) * b1c;
  V = V * b2 + (G * G) * b2c;
  P = P * keep - (M / (V.sqrt() * isq + eps)) * step;
}

void adamw_cpu(const std::vector<AdamWJob>& jobs, int64_t chunks) {
  parallel_for(0, chunks, std::max<int64_t>(1, kParallelGrain / kAdamWChunk), [&](int64_t lo, int64_t hi) {
    // the job holding chunk lo: the last one that starts at or before it
    size_t j = static_cast<size_t>(std::upper_bound(jobs.begin(), jobs.end(), lo,
                                                    [](int64_t c, const AdamWJob& x) { return c < x.first_chunk; }) -
                                   jobs.begin()) - 1;
    for (int64_t c = lo; c < hi; ++c) {
      while (c >= jobs[j].first_chunk + (jobs[j].n + kAdamWChunk - 1) / kAdamWChunk) ++j;
      const AdamWJob& job = jobs[j];
      const int64_t i0 = (c - job.first_chunk) * kAdamWChunk, len = std::min(kAdamWChunk, job.n - i0);
      if (job.dtype == kFloat32) adamw_chunk<float>(job, i0, len);
      else adamw_chunk<double>(job, i0, len);
    }
  });
}

bool fusable(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v) {
  return p.device().is_cpu() && (p.dtype() == kFloat32 || p.dtype() == kFloat64) && p.is_contiguous() &&
         g.is_contiguous() && m.is_contiguous() && v.is_contiguous() && !p.shares_storage_with(g);
}

}  // namespace

void AdamW::step() {
  NoGradGuard no_grad;
  const double b1 = options.beta1, b2 = options.beta2;
  std::vector<AdamWJob> jobs;  // the parameters the one-pass CPU loop updates, after the others
  int64_t chunks = 0;
  for (size_t i = 0; i < named_params().size(); ++i) {
    const auto& [name, param] = named_params()[i];
    Tensor g = grad_of("AdamW", name, param);
    if (!g.defined()) continue;
    ParamState& s = state_for(i);
    Tensor p = param.detach();
    Tensor& m = s.buffers[0];
    Tensor& v = s.buffers[1];
    const int64_t t = ++s.step;
    const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
    if (fusable(p, g, m, v)) {
      for (const Tensor* w : {&p, &m, &v}) {
        detail::check_writable("AdamW", *w);
        w->bump_version();
      }
      if (p.numel() == 0) continue;
      jobs.push_back({p.dtype(), p.data_ptr(), m.data_ptr(), v.data_ptr(), g.data_ptr(), p.numel(), chunks,
                      options.weight_decay != 0 ? 1.0 - lr() * options.weight_decay : 1.0, 1.0 - b1, b2, 1.0 - b2,
                      1.0 / std::sqrt(bc2), options.eps, lr() / bc1});
      chunks += (p.numel() + kAdamWChunk - 1) / kAdamWChunk;
      continue;
    }
    if (options.weight_decay != 0) copy_(p, mul(p, 1.0 - lr() * options.weight_decay));
    copy_(m, add(m, mul(sub(g, m), 1.0 - b1)));  // torch: exp_avg.lerp_(grad, 1 - beta1)
    copy_(v, add(mul(v, b2), mul(mul(g, g), 1.0 - b2)));
    Tensor denom = add(div(sqrt(v), std::sqrt(bc2)), options.eps);
    copy_(p, sub(p, mul(div(m, denom), lr() / bc1)));
  }
  if (chunks > 0) adamw_cpu(jobs, chunks);
}

}  // namespace tg::optim
