#include "nn/module.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/primitives.h"
#include "nn/detail/adjacent_storage.h"
#include "ops/cast.h"

namespace tg::nn {
namespace {

// Whether the tensors all[k], k in group, are contiguous and tile one range of their allocation
// (in some order), with no two the same.
bool tiles(const NamedTensors& all, std::vector<size_t>& group) {
  if (group.size() < 2) return false;
  std::sort(group.begin(), group.end(), [&](size_t a, size_t b) {
    return all[a].second.storage_offset() < all[b].second.storage_offset();
  });
  for (size_t j = 0; j < group.size(); ++j) {
    const Tensor& t = all[group[j]].second;
    if (!t.is_contiguous() || t.numel() == 0) return false;
    if (j > 0) {
      const Tensor& prev = all[group[j - 1]].second;
      if (t.dtype() != prev.dtype() || t.storage_offset() != prev.storage_offset() + prev.numel()) return false;
    }
  }
  return true;
}

// A tiling group's new values as views of one new allocation, in the same order, when every value
// is new, contiguous and of one dtype and device; the values themselves otherwise.
std::vector<Tensor> regrouped(const std::vector<Tensor>& values, const NamedTensors& all,
                              const std::vector<size_t>& group) {
  for (size_t j = 0; j < values.size(); ++j) {
    const Tensor& v = values[j];
    if (v.shares_storage_with(all[group[j]].second) || !v.is_contiguous() || v.dtype() != values[0].dtype() ||
        v.device() != values[0].device())
      return values;
  }
  return detail::adjacent_copies(values);
}

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

Tensor Module::forward(const Tensor&) {
  fail(type_name_.c_str(), "this module has no one-tensor forward(x); call its own forward(...)");
}

// ---------------------------------------------------------------- registration

void Module::check_new_name(const std::string& name) const {
  TG_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_.c_str(),
           "invalid member name '", name, "' (non-empty, without '.')");
  for (const auto& p : params_) TG_CHECK(p.name != name, type_name_.c_str(), "'", name, "' is already a parameter");
  for (const auto& b : buffers_) TG_CHECK(b.name != name, type_name_.c_str(), "'", name, "' is already a buffer");
  for (const auto& c : children_) TG_CHECK(c.name != name, type_name_.c_str(), "'", name, "' is already a submodule");
}

void Module::register_parameter(const std::string& name, Tensor& slot, bool requires_grad) {
  check_new_name(name);
  if (slot.defined()) {
    TG_CHECK(slot.is_leaf(), type_name_.c_str(), "parameter '", name, "' must be a leaf tensor (detach it first)");
    slot.requires_grad_(requires_grad);
  }
  params_.push_back({name, &slot});
}

void Module::register_buffer(const std::string& name, Tensor& slot, bool persistent, bool keeps_dtype) {
  check_new_name(name);
  buffers_.push_back({name, &slot, persistent, keeps_dtype});
}

void Module::register_child(const std::string& name, std::function<std::shared_ptr<Module>()> get,
                            std::function<void(const std::shared_ptr<Module>&)> set) {
  check_new_name(name);
  children_.push_back({name, std::move(get), std::move(set)});
}

void Module::reject_child(const std::string& name, const std::shared_ptr<Module>& m) {
  fail("replace_module", "the member '", name, "' cannot hold a ", m ? m->type_name() : std::string("null module"),
       " (its declared type is different)");
}

// ---------------------------------------------------------------- traversal

void Module::walk(const std::string& prefix, const std::function<void(const std::string&, const Module&)>& f) const {
  f(prefix, *this);
  for (const auto& c : children_)
    if (auto m = c.get()) m->walk(prefix.empty() ? c.name : prefix + "." + c.name, f);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  auto visit = [&](const std::string& prefix, const Module& m) {
    for (const auto& p : m.params_)
      if (p.slot->defined() && seen.insert(&p.slot->impl()).second)
        out.emplace_back(prefix.empty() ? p.name : prefix + "." + p.name, *p.slot);
  };
  if (recurse) walk("", visit);
  else visit("", *this);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_trainable_parameters() const {
  NamedTensors out;
  for (auto& [name, t] : named_parameters())
    if (t.requires_grad()) out.emplace_back(name, t);
  return out;
}

std::vector<Tensor> Module::trainable_parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_trainable_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  auto visit = [&](const std::string& prefix, const Module& m) {
    for (const auto& b : m.buffers_)
      if (b.slot->defined() && seen.insert(&b.slot->impl()).second)
        out.emplace_back(prefix.empty() ? b.name : prefix + "." + b.name, *b.slot);
  };
  if (recurse) walk("", visit);
  else visit("", *this);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  walk("", [&](const std::string& prefix, const Module& m) { out.emplace_back(prefix, const_cast<Module*>(&m)); });
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (const auto& c : children_)
    if (auto m = c.get()) out.emplace_back(c.name, m);
  return out;
}

std::shared_ptr<Module> Module::get_submodule(const std::string& path) const {
  TG_CHECK(!path.empty(), "get_submodule", "empty path");
  const Module* m = this;
  std::shared_ptr<Module> found;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    found = nullptr;
    for (const auto& c : m->children_)
      if (c.name == part) found = c.get();
    TG_CHECK(found != nullptr, "get_submodule", m->type_name_, " has no submodule '", part, "' (path '", path, "')");
    m = found.get();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return found;
}

void Module::replace_module(const std::string& path, std::shared_ptr<Module> module) {
  TG_CHECK(module != nullptr, "replace_module", "the new module for '", path, "' is null");
  size_t dot = path.rfind('.');
  Module* parent = dot == std::string::npos ? this : get_submodule(path.substr(0, dot)).get();
  std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
  for (auto& c : parent->children_)
    if (c.name == name) return c.set(module);
  fail("replace_module", parent->type_name_, " has no submodule '", name, "' (path '", path, "')");
}

Tensor Module::get_parameter(const std::string& path) const {
  for (auto& [name, t] : named_parameters())
    if (name == path) return t;
  for (auto& [name, t] : named_buffers())
    if (name == path) return t;
  // Tied parameters are listed once; look for the other names too.
  StateDict sd = state_dict();
  if (auto it = sd.find(path); it != sd.end()) return it->second;
  fail("get_parameter", type_name_, " has no parameter or buffer '", path, "'");
}

// ---------------------------------------------------------------- mode, placement

Module& Module::train(bool on) {
  walk("", [&](const std::string&, const Module& m) { const_cast<Module&>(m).training_ = on; });
  return *this;
}

Module& Module::gradient_checkpointing_enable(const GradientCheckpointingKwargs& kwargs) {
  bool supported = false;
  walk("", [&](const std::string&, const Module& m) { supported = supported || m.supports_gradient_checkpointing(); });
  TG_CHECK(supported, "gradient_checkpointing_enable", type_name_, " has no module whose forward checkpoints "
           "its layers (LlamaModel and GPT2Model do; a custom module can call tg::checkpoint itself)");
  walk("", [&](const std::string&, const Module& m) {
    const_cast<Module&>(m).gradient_checkpointing_ = true;
    const_cast<Module&>(m).checkpointing_kwargs_ = kwargs;
  });
  return *this;
}

Module& Module::gradient_checkpointing_disable() {
  walk("", [](const std::string&, const Module& m) { const_cast<Module&>(m).gradient_checkpointing_ = false; });
  return *this;
}

Module& Module::convert(const std::function<Tensor(const std::string& name, const Tensor&)>& f) {
  NoGradGuard no_grad;
  NamedTensors all = named_parameters();
  for (auto& named : named_buffers()) all.push_back(named);
  std::map<const Storage*, std::vector<size_t>> by_storage;
  for (size_t i = 0; i < all.size(); ++i) by_storage[all[i].second.storage().get()].push_back(i);
  std::vector<bool> done(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    if (done[i]) continue;
    // One tensor at a time (the peak grows by one tensor), or a whole allocation that tensors
    // tile (nn::place_weights_adjacent's groups), kept one allocation if they convert alike.
    std::vector<size_t> group = by_storage[all[i].second.storage().get()];
    if (!tiles(all, group)) group = {i};
    std::vector<Tensor> values;
    for (size_t k : group) values.push_back(f(all[k].first, all[k].second));
    if (group.size() > 1) values = regrouped(values, all, group);
    for (size_t j = 0; j < group.size(); ++j) {
      const Tensor& t = all[group[j]].second;
      const Tensor& value = values[j];
      done[group[j]] = true;
      if (value.same(t) || (value.dtype() == t.dtype() && value.device() == t.device() && value.shares_storage_with(t)))
        continue;
      Tensor grad = t.grad();
      detail::set_data(t, value);
      if (grad.defined()) t.set_grad(tg::to(grad, value.dtype(), value.device()));
    }
  }
  return *this;
}

Module& Module::to(Device device) {
  return convert([&](const std::string&, const Tensor& t) { return tg::to(t.detach(), device); });
}

Module& Module::to(DType dtype) {
  return to(dtype, [](const std::string&, const Tensor&) { return true; });
}

Module& Module::to(DType dtype, const std::function<bool(const std::string& name, const Tensor& t)>& which) {
  TG_CHECK(is_floating_point(dtype), "Module::to", "modules convert to floating-point dtypes only, got ", dtype);
  std::set<const Storage*> kept;  // by storage: convert passes detached handles
  walk("", [&](const std::string&, const Module& m) {
    for (const auto& b : m.buffers_)
      if (b.keeps_dtype && b.slot->defined()) kept.insert(b.slot->storage().get());
  });
  return convert([&](const std::string& name, const Tensor& t) {
    return is_floating_point(t.dtype()) && !kept.count(t.storage().get()) && which(name, t) ? tg::to(t.detach(), dtype) : t;
  });
}

Module& Module::to(DType dtype, Device device) {
  to(device);
  return to(dtype);
}

// ---------------------------------------------------------------- state

StateDict Module::state_dict() const {
  StateDict out;
  walk("", [&](const std::string& prefix, const Module& m) {
    auto full = [&](const std::string& n) { return prefix.empty() ? n : prefix + "." + n; };
    for (const auto& p : m.params_)
      if (p.slot->defined()) out[full(p.name)] = *p.slot;
    for (const auto& b : m.buffers_)
      if (b.persistent && b.slot->defined()) out[full(b.name)] = *b.slot;
  });
  return out;
}

LoadResult Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = state_dict();
  LoadResult r;
  std::vector<std::string> mismatched;
  for (const auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end()) {
      r.missing_keys.push_back(name);
    } else if (!it->second.defined() || it->second.shape() != t.shape()) {
      mismatched.push_back(name + " (checkpoint " +
                           (it->second.defined() ? shape_str(it->second.shape()) : std::string("undefined")) +
                           ", model " + shape_str(t.shape()) + ")");
    }
  }
  for (const auto& [name, t] : state)
    if (!own.count(name)) r.unexpected_keys.push_back(name);
  const bool fails = !mismatched.empty() || (strict && (!r.missing_keys.empty() || !r.unexpected_keys.empty()));
  if (fails) {
    const size_t problems = mismatched.size() + (strict ? r.missing_keys.size() + r.unexpected_keys.size() : 0);
    std::ostringstream os;
    os << problems << " problem(s) loading a state dict into " << type_name_ << ":";
    if (strict && !r.missing_keys.empty())
      os << "\n  missing keys (" << r.missing_keys.size() << "): " << name_list(r.missing_keys);
    if (strict && !r.unexpected_keys.empty())
      os << "\n  unexpected keys (" << r.unexpected_keys.size() << "): " << name_list(r.unexpected_keys);
    if (!mismatched.empty()) os << "\n  shape mismatches (" << mismatched.size() << "): " << name_list(mismatched);
    fail("load_state_dict", os.str());
  }
  NoGradGuard no_grad;
  for (const auto& [name, t] : own)
    if (auto it = state.find(name); it != state.end()) copy_(t, it->second);
  return r;
}

// ---------------------------------------------------------------- gradients

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.set_grad(Tensor());
}

Module& Module::requires_grad_(bool on) {
  for (auto& [name, t] : named_parameters())
    if (is_floating_point(t.dtype())) t.requires_grad_(on);
  return *this;
}

int64_t Module::num_parameters(bool only_trainable) const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters())
    if (!only_trainable || t.requires_grad()) n += t.numel();
  return n;
}

// ---------------------------------------------------------------- printing

std::string Module::str() const {
  std::string out = type_name_ + "(" + extra_repr();
  if (!children_.empty()) {
    out += "\n";
    for (const auto& c : children_) {
      auto m = c.get();
      if (!m) continue;
      std::string child = m->str(), indented;
      for (char ch : child) indented += ch == '\n' ? std::string("\n  ") : std::string(1, ch);
      out += "  (" + c.name + "): " + indented + "\n";
    }
  }
  return out + ")";
}

}  // namespace tg::nn
