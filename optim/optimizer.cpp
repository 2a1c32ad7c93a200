#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <tuple>

#include "core/autograd.h"
#include "core/cuda_graph.h"
#include "core/factory.h"
#include "core/primitives.h"
#include "io/safetensors.h"
#include "ops/adamw_step.h"
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

ParamGroupSpec::ParamGroupSpec(const std::vector<Tensor>& ps, GroupOptions options) : options(options) {
  for (const Tensor& p : ps) params.emplace_back("", p);  // "": named by index in the optimizer
}

Optimizer::Optimizer(std::string type, std::vector<ParamGroupSpec> groups, double default_lr,
                     double default_weight_decay, std::vector<std::string> buffer_names)
    : buffer_names_(std::move(buffer_names)), type_(std::move(type)) {
  TG_CHECK(!groups.empty(), type_.c_str(), "wants at least one parameter group, got none");
  std::set<const TensorImpl*> seen;
  std::set<std::string> names;
  for (ParamGroupSpec& g : groups) {
    std::vector<size_t> members;
    for (auto& [name, p] : g.params) {
      if (name.empty()) name = std::to_string(params_.size());
      TG_CHECK(p.defined(), type_.c_str(), "parameter '", name, "' is undefined");
      TG_CHECK(p.is_leaf() && is_floating_point(p.dtype()), type_.c_str(), "parameter '", name,
               "' must be a floating-point leaf tensor");
      TG_CHECK(seen.insert(&p.impl()).second, type_.c_str(), "parameter '", name, "' is given twice");
      TG_CHECK(names.insert(name).second, type_.c_str(), "two parameters are named '", name, "'");
      members.push_back(params_.size());
      params_.emplace_back(std::move(name), std::move(p));
    }
    groups_.push_back({g.options.lr.value_or(default_lr), g.options.weight_decay.value_or(default_weight_decay),
                       std::move(members)});
  }
  check_groups();
  state_.resize(params_.size());
}

void Optimizer::check_groups() const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& x = groups_[g];
    TG_CHECK(std::isfinite(x.lr) && x.lr >= 0 && std::isfinite(x.weight_decay) && x.weight_decay >= 0,
             type_.c_str(), "group ", g, ": lr and weight_decay must be finite and >= 0, got ", x.lr, " and ",
             x.weight_decay);
  }
}

void Optimizer::set_lr(double lr) {
  TG_CHECK(lr >= 0 && std::isfinite(lr), type_.c_str(), "lr must be finite and >= 0, got ", lr);
  for (ParamGroup& g : groups_) g.lr = lr;
}

int64_t Optimizer::step_count(size_t i) const {
  const ParamState& s = state_.at(i);
  return s.counters.defined() ? static_cast<int64_t>(s.counters.to_vector<double>()[0]) : s.step;
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.set_grad(Tensor());
}

Optimizer::ParamState& Optimizer::state_for(size_t i) {
  ParamState& s = state_[i];
  const Tensor& p = params_[i].second;
  if (s.buffers.empty())
    for (size_t b = 0; b < buffer_names_.size(); ++b)
      s.buffers.push_back(zeros(p.shape(), {state_dtype(p), p.device()}));
  return s;
}

namespace {

std::string group_key(size_t g, const char* field) { return "param_groups." + std::to_string(g) + "." + field; }

// The groups' (lr, weight_decay) in `state`, checked against the optimizer's groups: entries read
// go into `used`, problems into `problems`. Empty when the state has no param_groups entries.
std::vector<std::pair<double, double>> read_groups(const OptimizerState& state, std::span<const ParamGroup> groups,
                                                   const NamedParams& params, std::set<std::string>& used,
                                                   std::vector<std::string>& problems) {
  std::vector<std::pair<double, double>> out;
  size_t count = 0;
  while (state.count(group_key(count, "params"))) ++count;
  if (count == 0) return out;
  if (count != groups.size()) {
    problems.push_back("the state has " + std::to_string(count) + " parameter group(s), the optimizer " +
                       std::to_string(groups.size()));
    for (const auto& [key, t] : state)
      if (key.starts_with("param_groups.")) used.insert(key);  // one problem, not one per entry
    return out;
  }
  auto find = [&](size_t g, const char* field) {
    auto it = state.find(group_key(g, field));
    if (it == state.end()) problems.push_back("missing '" + group_key(g, field) + "'");
    else used.insert(it->first);
    return it;
  };
  auto number = [&](size_t g, const char* field) {
    auto it = find(g, field);
    if (it == state.end()) return 0.0;
    const double x = it->second.numel() == 1 ? it->second.item() : -1.0;
    if (!(std::isfinite(x) && x >= 0)) problems.push_back("'" + it->first + "' must be one finite number >= 0");
    return x;
  };
  auto names_of = [&](const std::vector<int64_t>& idx) {
    std::vector<std::string> names;
    for (int64_t i : idx)
      names.push_back(i >= 0 && static_cast<size_t>(i) < params.size() ? "'" + params[i].first + "'"
                                                                        : "#" + std::to_string(i));
    return "[" + join(names) + "]";
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    out.emplace_back(number(g, "lr"), number(g, "weight_decay"));
    auto it = find(g, "params");
    if (it == state.end()) continue;
    if (it->second.dim() != 1 || is_floating_point(it->second.dtype())) {
      problems.push_back("'" + it->first + "' must be a 1-d integer tensor");
      continue;
    }
    const std::vector<int64_t> got = to(it->second, kInt64).to_vector<int64_t>();
    const std::vector<int64_t> want(groups[g].params.begin(), groups[g].params.end());
    if (got != want)
      problems.push_back("group " + std::to_string(g) + " holds " + names_of(got) + " in the state, " +
                         names_of(want) + " here");
  }
  return out;
}

}  // namespace

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.buffers.empty()) continue;
    const std::string& name = params_[i].first;
    out[name + ".step"] = scalar_tensor(static_cast<double>(step_count(i)), {.dtype = kInt64});
    for (size_t b = 0; b < buffer_names_.size(); ++b) out[name + "." + buffer_names_[b]] = s.buffers[b];
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& x = groups_[g];
    out[group_key(g, "lr")] = scalar_tensor(x.lr, {.dtype = kFloat64});
    out[group_key(g, "weight_decay")] = scalar_tensor(x.weight_decay, {.dtype = kFloat64});
    out[group_key(g, "params")] = from_vector(std::vector<int64_t>(x.params.begin(), x.params.end()),
                                              {static_cast<int64_t>(x.params.size())});
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  std::vector<std::string> problems;
  std::set<std::string> used;
  const std::vector<std::pair<double, double>> groups = read_groups(state, groups_, params_, used, problems);
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
      fresh[i].buffers.push_back(clone_data(to(it->second, state_dtype(p), p.device())));
    }
  }
  for (const auto& [key, t] : state)
    if (!used.count(key)) problems.push_back("unexpected '" + key + "'");
  TG_CHECK(problems.empty(), "load_state_dict", type_, " state does not fit its parameters (", problems.size(),
           " problem(s)): ", join(problems));
  state_ = std::move(fresh);
  for (size_t g = 0; g < groups.size(); ++g) std::tie(groups_[g].lr, groups_[g].weight_decay) = groups[g];
}

void Optimizer::save(const std::string& path) const {
  safetensors::save_file(state_dict(), path, {{"optimizer", type_}, {"format", "tapegrad"}});
}

void Optimizer::load(const std::string& path) {
  safetensors::Loaded f = safetensors::load_file_with_metadata(path);
  auto type = f.metadata.find("optimizer");
  TG_CHECK(type != f.metadata.end() && type->second == type_, "load", "'", path, "' holds ",
           type == f.metadata.end() ? std::string("no optimizer state") : type->second + " state", ", wants ", type_);
  load_state_dict(f.tensors);
}

// ---------------------------------------------------------------- SGD

SGD::SGD(std::vector<ParamGroupSpec> groups, SGDOptions o)
    : Optimizer("SGD", std::move(groups), o.lr, o.weight_decay,
                o.momentum != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{}),
      options(o) {
  TG_CHECK(o.momentum >= 0, "SGD", "momentum must be >= 0, got ", o.momentum);
  TG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD", "nesterov needs momentum > 0 and dampening 0");
}

void SGD::step() {
  check_groups();
  NoGradGuard no_grad;
  for (const ParamGroup& group : param_groups()) {
    for (size_t i : group.params) {
      const auto& [name, param] = named_params()[i];
      Tensor g = grad_of("SGD", name, param);
      if (!g.defined()) continue;
      Tensor p = param.detach();
      Tensor d = group.weight_decay != 0 ? add(g, mul(p, group.weight_decay)) : g;
      if (options.momentum != 0) {
        const bool first = state_[i].buffers.empty();
        ParamState& s = state_for(i);
        Tensor& buf = s.buffers[0];
        // The first step starts the buffer at d itself (torch: buf = clone(d_p)).
        copy_(buf, first ? d : add(mul(buf, options.momentum), mul(d, 1.0 - options.dampening)));
        d = options.nesterov ? add(d, mul(buf, options.momentum)) : buf;
        ++s.step;
      }
      copy_(p, sub(p, mul(d, group.lr)));
    }
  }
}

// ---------------------------------------------------------------- AdamW

AdamW::AdamW(std::vector<ParamGroupSpec> groups, AdamWOptions o)
    : Optimizer("AdamW", std::move(groups), o.lr, o.weight_decay, {"exp_avg", "exp_avg_sq"}), options(o) {
  TG_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "AdamW", "betas must be in [0, 1), got (",
           o.beta1, ", ", o.beta2, ")");
  TG_CHECK(o.eps >= 0, "AdamW", "eps must be >= 0, got ", o.eps);
}

DType AdamW::state_dtype(const Tensor& param) const {
  return param.dtype() == kBFloat16 ? kFloat32 : param.dtype();  // as adamw_step_ wants
}

const Tensor& AdamW::device_lr(size_t group, Device device, bool create) {
  auto it = std::find_if(device_lrs_.begin(), device_lrs_.end(),
                         [&](const DeviceLr& d) { return d.group == group && d.device == device; });
  if (it == device_lrs_.end()) {
    TG_CHECK(create, "AdamW", "group ", group, " has no lr on ", device,
             " yet while a CUDA graph captures; take one step eagerly before capturing");
    const ParamGroup& g = param_groups()[group];
    device_lrs_.push_back({group, device, from_vector(std::vector<double>{g.lr, g.weight_decay}, {2}, device), g.lr,
                           g.weight_decay});
    return device_lrs_.back().lr_wd;
  }
  if (create) upload_lrs();  // not during a capture: the replays upload
  return it->lr_wd;
}

void AdamW::upload_lrs() {
  check_groups();
  for (DeviceLr& d : device_lrs_) {
    const ParamGroup& g = param_groups()[d.group];
    if (d.lr == g.lr && d.weight_decay == g.weight_decay) continue;
    // Queued behind the steps that read the old values, ahead of the next one.
    copy_(d.lr_wd, from_vector(std::vector<double>{g.lr, g.weight_decay}, {2}));
    d.lr = g.lr, d.weight_decay = g.weight_decay;
  }
}

void AdamW::step() {
  check_groups();
  NoGradGuard no_grad;
  std::vector<AdamWParamStep> work;  // every parameter with a grad, in one fused call
  std::vector<Device> captured_on;
  for (size_t gi = 0; gi < param_groups().size(); ++gi) {
    for (size_t i : param_groups()[gi].params) {
      const auto& [name, param] = named_params()[i];
      Tensor g = grad_of("AdamW", name, param);
      if (!g.defined()) continue;
      const bool capturing = cuda::is_current_stream_capturing(param.device());
      const bool has_state = !state_[i].buffers.empty() && state_[i].counters.defined();
      TG_CHECK(!capturing || has_state, "AdamW", "parameter '", name,
               "' has no state yet while a CUDA graph captures: its moments would be zeroed again at every "
               "replay; take one step eagerly before capturing");
      ParamState& s = state_for(i);
      if (!s.counters.defined())
        s.counters = from_vector(std::vector<double>{static_cast<double>(s.step), 0, 0, 0}, {4}, param.device());
      const Tensor& lr_wd = device_lr(gi, param.device(), !capturing);
      if (capturing && std::find(captured_on.begin(), captured_on.end(), param.device()) == captured_on.end())
        captured_on.push_back(param.device());
      work.push_back({param.detach(), g, s.buffers[0], s.buffers[1], 0, 0, 1, s.counters, lr_wd});
    }
  }
  const std::string key = "AdamW@" + std::to_string(reinterpret_cast<uintptr_t>(this));
  for (Device d : captured_on) cuda::at_each_replay(d, key, [this] { upload_lrs(); });
  adamw_step_(work, options.beta1, options.beta2, options.eps);
}

}  // namespace tg::optim
