#include "core/autograd.h"

#include <algorithm>
#include <atomic>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/primitives.h"
#include "core/trace.h"

namespace tg {

// ---------------------------------------------------------------- grad mode
namespace {
thread_local bool grad_enabled = true;
thread_local std::vector<Tensor>* observed = nullptr;  // ObservedNoGradGuard's `used`
std::atomic<uint64_t> next_sequence_nr{0};

void observe(const std::vector<NamedInput>& inputs) {
  for (const auto& in : inputs) {
    if (!in.tensor.defined() || !in.tensor.requires_grad()) continue;
    if (std::none_of(observed->begin(), observed->end(), [&](const Tensor& t) { return t.same(in.tensor); }))
      observed->push_back(in.tensor);
  }
}
}  // namespace

bool grad_mode_enabled() { return grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(grad_enabled), prev_observed_(observed) {
  grad_enabled = false;
  observed = nullptr;
}
NoGradGuard::~NoGradGuard() {
  grad_enabled = prev_;
  observed = prev_observed_;
}
EnableGradGuard::EnableGradGuard() : prev_(grad_enabled) { grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { grad_enabled = prev_; }
ObservedNoGradGuard::ObservedNoGradGuard(std::vector<Tensor>& used) { observed = &used; }
ObservedNoGradGuard::~ObservedNoGradGuard() { observed = nullptr; }

// ---------------------------------------------------------------- saved tensors
SavedTensor::SavedTensor(const Tensor& t, std::string name) : name_(std::move(name)) {
  if (!t.defined()) return;
  data_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::unpack(const char* op) const {
  TG_CHECK(!released_, op, "saved tensor '", name_, "' was already freed: backward through "
           "the graph a second time needs backward(..., retain_graph=true) the first time");
  TG_CHECK(data_.defined(), op, "saved tensor '", name_, "' was not saved at forward: a gradient "
           "the op did not plan for was asked (an op bug)");
  TG_CHECK(data_.version() == version_, op, "saved tensor '", name_, "' (shape ", data_.shape(),
           ") was modified in place after it was saved: it is at version ", data_.version(),
           ", backward wants version ", version_, " (use an out-of-place op, or clone before writing)");
  return data_;
}

// ---------------------------------------------------------------- nodes
std::string Node::variant(const GradMask& mask) const {
  std::string v;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) v += (v.empty() ? "d" : ",d") + input_names_[i];
  return v.empty() ? "none" : v;
}

size_t Node::saved_bytes() const {
  size_t n = 0;
  for (const auto& s : saved) n += s.nbytes();
  return n;
}

// Adds incoming gradients into a leaf's .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
    sequence_nr_ = next_sequence_nr++;
  }
  const char* name() const override { return "accumulate_grad"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const GradMask&) override {
    Tensor g = grads[0];
    if (!leaf_->grad) {
      // Steal the buffer when nothing else can see it, else copy: .grad must never alias.
      bool own = g.storage().use_count() == 1 && g.is_contiguous() && g.storage_offset() == 0;
      leaf_->grad = (own ? g : clone_data(g)).detach().impl_ptr();
    } else {
      accumulate_(Tensor(leaf_->grad), g);
    }
    if (!leaf_->post_accumulate_grad_hooks.empty()) {
      const Tensor leaf(leaf_);
      // A copy: a hook may register or remove hooks.
      const auto hooks = leaf_->post_accumulate_grad_hooks;
      for (const auto& [id, hook] : hooks) hook(leaf);
    }
    return {};
  }
  std::string variant(const GradMask&) const override { return "grad"; }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

namespace {

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  auto& impl = leaf.impl();
  if (auto acc = impl.grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
  impl.grad_accumulator = acc;
  return acc;
}

}  // namespace

Edge gradient_edge(const Tensor& t) {
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  if (t.requires_grad()) return {grad_accumulator(t), 0};
  return {};
}

HookHandle& HookHandle::operator=(HookHandle&& other) noexcept {
  if (this != &other) {
    remove();
    leaf_ = std::move(other.leaf_), id_ = other.id_;
    other.leaf_.reset();
  }
  return *this;
}

void HookHandle::remove() {
  if (auto impl = leaf_.lock())
    std::erase_if(impl->post_accumulate_grad_hooks, [&](const auto& h) { return h.first == id_; });
  leaf_.reset();
}

HookHandle register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook) {
  TG_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(), "register_post_accumulate_grad_hook",
           "wants a leaf tensor that requires grad, got ",
           !leaf.defined() ? "an undefined tensor" : !leaf.is_leaf() ? "a non-leaf (an op's output)" : "a tensor without requires_grad");
  TG_CHECK(hook != nullptr, "register_post_accumulate_grad_hook", "got an empty hook");
  static std::atomic<uint64_t> next_id{1};
  const uint64_t id = next_id++;
  leaf.impl().post_accumulate_grad_hooks.emplace_back(id, std::move(hook));
  return HookHandle(leaf.impl_ptr(), id);
}

bool in_checkpoint_first_pass() { return observed != nullptr; }

bool needs_record(const std::vector<NamedInput>& inputs) {
  if (!grad_enabled) {
    if (observed) observe(inputs);
    return false;
  }
  for (const auto& in : inputs)
    if (in.tensor.defined() && in.tensor.requires_grad()) return true;
  return false;
}

void Node::connect(const std::shared_ptr<Node>& self, const std::vector<NamedInput>& inputs,
                   const std::vector<Tensor>& outputs) {
  for (const auto& in : inputs) {
    const Tensor& t = in.tensor;
    self->input_names_.emplace_back(in.name);
    self->edges_.push_back(t.defined() ? gradient_edge(t) : Edge{});
    self->input_shapes_.push_back(t.defined() ? t.shape() : Shape{});
    self->input_dtypes_.push_back(t.defined() ? t.dtype() : kFloat32);
    self->input_devices_.push_back(t.defined() ? t.device() : Device::cpu());
  }
  // Numbered after its inputs' nodes (a leaf's accumulator may have been created just above),
  // so reverse numbering order is a valid backward order.
  self->sequence_nr_ = next_sequence_nr++;
  self->num_outputs_ = static_cast<uint32_t>(outputs.size());
  self->retained_outputs_.resize(outputs.size());
  for (uint32_t k = 0; k < outputs.size(); ++k) {
    TensorImpl& out = outputs[k].impl();
    out.grad_fn = self;
    out.output_nr = k;
    out.requires_grad = true;
  }
}

// ---------------------------------------------------------------- the engine
// One backward pass: the reachable nodes in reverse recording order, which of them run, and
// each running node's mask.
class Engine {
 public:
  Engine(const std::vector<Tensor>& roots, const std::vector<Tensor>& inputs) {
    for (const auto& r : roots) {
      TG_CHECK(r.defined() && r.requires_grad(), "backward",
               "a root tensor does not require grad and has no grad_fn (shape ",
               r.defined() ? r.shape() : Shape{}, "): nothing to differentiate");
      root_edges_.push_back(gradient_edge(r));
    }
    for (const auto& in : inputs) {
      TG_CHECK(in.defined() && in.is_leaf() && in.requires_grad(), "backward",
               "inputs= wants leaf tensors that require grad");
      targets_.insert(grad_accumulator(in).get());
    }
    collect();
  }

  // Reverse recording order is a valid reverse topological order: a node's inputs were all
  // produced (and their nodes recorded) before it.
  void collect() {
    std::vector<Node*> stack;
    std::unordered_set<Node*> seen;
    for (const auto& e : root_edges_)
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      order_.push_back(n);
      for (const auto& e : n->edges_)
        if (e && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
    std::sort(order_.begin(), order_.end(),
              [](Node* a, Node* b) { return a->sequence_nr_ > b->sequence_nr_; });
    // needed: the node leads to a target. Inputs come later in order_, so walk it backwards.
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      Node* n = *it;
      bool need = is_target(n);
      for (const auto& e : n->edges_) need = need || (e && needed_.count(e.fn.get()));
      if (need) needed_.insert(n);
    }
  }

  bool is_target(Node* n) const {
    for (const auto& w : n->retained_outputs_)
      if (!w.expired()) return true;
    if (!dynamic_cast<AccumulateGrad*>(n)) return false;
    return targets_.empty() || targets_.count(n);
  }

  GradMask mask_of(Node* n) const {
    GradMask m(n->edges_.size());
    for (size_t i = 0; i < m.size(); ++i) m[i] = n->edges_[i] && needed_.count(n->edges_[i].fn.get());
    return m;
  }

  // captured: when given, the gradients that reach the targets' accumulators go there instead
  // of into .grad (grad()).
  void run(const std::vector<Tensor>& root_grads, bool retain_graph,
           std::unordered_map<Node*, Tensor>* captured = nullptr) {
    std::unordered_map<Node*, std::vector<Tensor>> buffers;
    for (size_t i = 0; i < root_edges_.size(); ++i) add_to(buffers, root_edges_[i], root_grads[i]);
    NoGradGuard no_grad;
    for (Node* n : order_) {
      if (!needed_.count(n)) continue;
      auto found = buffers.find(n);
      if (found == buffers.end()) continue;  // no gradient reached it: all zero
      std::vector<Tensor> grads = std::move(found->second);
      buffers.erase(found);
      for (size_t k = 0; k < n->retained_outputs_.size(); ++k)
        if (auto out = n->retained_outputs_[k].lock(); out && grads[k].defined())
          accumulate_retained(out, grads[k]);
      if (captured && dynamic_cast<AccumulateGrad*>(n)) {
        (*captured)[n] = grads[0];
        continue;
      }
      GradMask mask = mask_of(n);
      if (KernelTrace::active()) KernelTrace::record(std::string(n->name()) + ".backward[" + n->variant(mask) + "]");
      std::vector<Tensor> out = n->backward(grads, mask);
      if (!retain_graph)
        for (auto& s : n->saved) s.release();
      if (dynamic_cast<AccumulateGrad*>(n)) continue;
      TG_CHECK(out.size() == n->edges_.size(), n->name(), "backward returned ", out.size(),
               " gradients for ", n->edges_.size(), " inputs");
      for (size_t i = 0; i < out.size(); ++i) {
        if (!mask[i]) {
          TG_CHECK(!out[i].defined(), n->name(), "backward computed a gradient for '",
                   n->input_names_[i], "' that its mask did not ask for");
          continue;
        }
        check_grad(n, i, out[i]);
        add_to(buffers, n->edges_[i], out[i]);
      }
    }
  }

 private:
  static void accumulate_retained(const std::shared_ptr<TensorImpl>& out, const Tensor& g) {
    if (!out->grad) out->grad = clone_data(g).impl_ptr();
    else accumulate_(Tensor(out->grad), g);
  }

  static void add_to(std::unordered_map<Node*, std::vector<Tensor>>& buffers, const Edge& e, const Tensor& g) {
    auto& slot = buffers[e.fn.get()];
    if (slot.empty()) slot.resize(e.fn->num_outputs_);
    Tensor& have = slot[e.input_nr];
    if (!have.defined()) {
      have = g;
    } else if (have.impl_ptr().use_count() == 1 && have.storage().use_count() == 1 && have.is_contiguous()) {
      // Nothing else can see the first gradient (one handle, one view of its storage): add in
      // place, one pass instead of a copy and an add.
      accumulate_(have, g);
    } else {
      // The first gradient may alias a tensor someone else holds: sum into a fresh buffer.
      Tensor sum = clone_data(have);
      accumulate_(sum, g);
      have = sum;
    }
  }

  static void check_grad(Node* n, size_t i, const Tensor& g) {
    TG_CHECK(g.defined(), n->name(), "backward returned no gradient for '", n->input_names_[i],
             "' although its mask asked for one");
    TG_CHECK(g.shape() == n->input_shapes_[i] && g.dtype() == n->input_dtypes_[i] &&
                 g.device() == n->input_devices_[i],
             n->name(), "backward returned a gradient for '", n->input_names_[i], "' of shape ",
             g.shape(), " ", g.dtype(), " on ", g.device(), ", the input is ", n->input_shapes_[i],
             " ", n->input_dtypes_[i], " on ", n->input_devices_[i]);
  }

  friend std::vector<PlanStep> backward_plan(const std::vector<Tensor>&, const std::vector<Tensor>&);
  std::vector<Edge> root_edges_;
  std::unordered_set<Node*> targets_;
  std::vector<Node*> order_;
  std::unordered_set<Node*> needed_;
};

namespace {

// The gradients the roots start from: `grads`, or 1 for one-element roots when it is empty.
std::vector<Tensor> seeds_of(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  TG_CHECK(grads.empty() || grads.size() == roots.size(), "backward", "got ", grads.size(),
           " gradients for ", roots.size(), " roots");
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    Tensor g = grads.empty() ? Tensor() : grads[i];
    if (!g.defined()) {
      TG_CHECK(r.numel() == 1, "backward", "a gradient can be created implicitly only for a "
               "one-element output, got shape ", r.shape(), ": pass backward(grad)");
      g = Tensor::empty(r.shape(), r.options());
      fill_(g, 1.0);
    }
    TG_CHECK(g.shape() == r.shape() && g.dtype() == r.dtype() && g.device() == r.device(),
             "backward", "gradient ", g.shape(), " ", g.dtype(), " on ", g.device(),
             " does not match the output ", r.shape(), " ", r.dtype(), " on ", r.device());
    seeds.push_back(g);
  }
  return seeds;
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph,
              const std::vector<Tensor>& inputs) {
  Engine engine(roots, inputs);
  engine.run(seeds_of(roots, grads), retain_graph);
}

std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs, bool retain_graph) {
  TG_CHECK(!inputs.empty(), "grad", "wants at least one input to differentiate with respect to");
  Engine engine(roots, inputs);
  std::unordered_map<Node*, Tensor> captured;
  engine.run(seeds_of(roots, grads), retain_graph, &captured);
  std::vector<Tensor> out;
  for (const auto& in : inputs) {
    auto it = captured.find(gradient_edge(in).fn.get());
    out.push_back(it == captured.end() ? Tensor() : it->second);
  }
  return out;
}

std::vector<PlanStep> backward_plan(const std::vector<Tensor>& roots, const std::vector<Tensor>& inputs) {
  Engine engine(roots, inputs);
  std::vector<PlanStep> plan;
  for (Node* n : engine.order_) {
    GradMask mask = engine.mask_of(n);
    bool runs = engine.needed_.count(n) > 0;
    plan.push_back({n->name(), mask, runs ? n->variant(mask) : "skipped", n->input_names(),
                    n->saved_bytes(), runs});
  }
  return plan;
}

std::string format_plan(const std::vector<PlanStep>& plan) {
  std::ostringstream os;
  for (const auto& s : plan) {
    os << s.node << "[" << s.variant << "]";
    if (!s.inputs.empty()) {
      os << " mask(";
      for (size_t i = 0; i < s.inputs.size(); ++i) os << (i ? " " : "") << s.inputs[i] << "=" << s.mask[i];
      os << ")";
    }
    if (s.saved_bytes) os << " saved " << s.saved_bytes << " B";
    os << "\n";
  }
  return os.str();
}

}  // namespace tg
