#include "core/activation_checkpoint.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/activation_offload.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/generator.h"

namespace tg {

namespace detail {
thread_local DrawObserver* draw_observer = nullptr;
}  // namespace detail

namespace {

constexpr const char* kOp = "checkpoint";

// A generator the function drew from: its state before the first draw, its offset after the last.
struct Draws {
  Generator* gen;
  uint64_t seed, first, last;
  bool operator==(const Draws&) const = default;
};

// The generators drawn from in its scope, in order of first draw. A log outside it sees the
// draws too (a checkpoint recomputed inside another's recomputation).
class DrawLog final : public detail::DrawObserver {
 public:
  DrawLog() : outer_(detail::draw_observer) { detail::draw_observer = this; }
  ~DrawLog() { detail::draw_observer = outer_; }
  DrawLog(const DrawLog&) = delete;
  DrawLog& operator=(const DrawLog&) = delete;

  void before_draw(Generator& gen) override {
    if (outer_) outer_->before_draw(gen);
    if (std::none_of(draws_.begin(), draws_.end(), [&](const Draws& d) { return d.gen == &gen; }))
      draws_.push_back({&gen, gen.seed(), gen.offset(), 0});
  }
  std::vector<Draws> finish() {
    for (auto& d : draws_) d.last = d.gen->offset();
    return draws_;
  }

 private:
  detail::DrawObserver* outer_;
  std::vector<Draws> draws_;
};

// Puts the generators where the forward found them, and back where they are now at the end of
// its scope: the recomputation draws the forward's numbers and leaves every stream as it was.
class Rewind {
 public:
  explicit Rewind(const std::vector<Draws>& draws) {
    for (const auto& d : draws) {
      now_.push_back({d.gen, d.gen->seed(), d.gen->offset()});
      d.gen->set_state(d.seed, d.first);
    }
  }
  ~Rewind() {
    for (const auto& n : now_) n.gen->set_state(n.seed, n.offset);
  }
  Rewind(const Rewind&) = delete;
  Rewind& operator=(const Rewind&) = delete;

 private:
  struct State {
    Generator* gen;
    uint64_t seed, offset;
  };
  std::vector<State> now_;
};

class CheckpointBackward final : public Node {
 public:
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const GradMask& mask) override;

  CheckpointFunction fn;
  size_t num_args = 0;         // saved[0, num_args) are fn's inputs, the rest the parameters
  std::vector<Tensor> params;  // the leaves fn used that require grad: gradient targets
  std::vector<Draws> draws;
  std::vector<Shape> out_shapes;
  std::vector<DType> out_dtypes;
  // Per input, null where `saved` keeps it; their host memory lives as long as the node.
  std::vector<std::shared_ptr<OffloadedTensor>> offloaded;

 private:
  Tensor input(size_t i) const;
  std::vector<Tensor> recompute(const std::vector<Tensor>& args) const;
};

std::vector<Tensor> CheckpointBackward::recompute(const std::vector<Tensor>& args) const {
  std::vector<Tensor> outs;
  std::vector<Draws> redrawn;
  {
    Rewind rewind(draws);
    DrawLog log;
    EnableGradGuard grad_on;
    outs = fn(args);
    redrawn = log.finish();
  }
  TG_CHECK(redrawn == draws, kOp, "the recomputation at backward drew from ", redrawn.size(),
           " generator(s) other numbers than the forward did from ", draws.size(),
           ": the function must compute the same thing again (was a module switched between train "
           "and eval?)");
  TG_CHECK(outs.size() == out_shapes.size(), kOp, "the recomputation returned ", outs.size(),
           " tensors, the forward ", out_shapes.size());
  for (size_t k = 0; k < outs.size(); ++k)
    TG_CHECK(outs[k].defined() && outs[k].shape() == out_shapes[k] && outs[k].dtype() == out_dtypes[k], kOp,
             "the recomputation's output ", k, " is ", outs[k].defined() ? shape_str(outs[k].shape()) : "undefined",
             outs[k].defined() ? std::string(" ") + dtype_name(outs[k].dtype()) : "", ", the forward's was ",
             out_shapes[k], " ", out_dtypes[k], ": the function must compute the same thing again");
  return outs;
}

Tensor CheckpointBackward::input(size_t i) const {
  return i < offloaded.size() && offloaded[i] ? offloaded[i]->get() : unpack(i);
}

std::vector<Tensor> CheckpointBackward::backward(const std::vector<Tensor>& grads, const GradMask& mask) {
  // Detached inputs (a gradient is wanted from those that require grad), then the parameters.
  std::vector<Tensor> args, targets;
  for (size_t i = 0; i < num_args; ++i) {
    Tensor a = input(i).detach();
    if (mask[i]) targets.push_back(a.requires_grad_(true));
    args.push_back(a);
  }
  for (size_t j = 0; j < params.size(); ++j) {
    unpack(num_args + j);  // the version check: a parameter written since the forward is an error
    if (mask[num_args + j]) targets.push_back(params[j]);
  }
  std::vector<Tensor> out(num_inputs());
  if (targets.empty()) return out;

  // The layer below's inputs come back while this one recomputes.
  for (const auto& o : offloaded)
    if (auto below = o ? o->previous() : nullptr) below->prefetch();
  const std::vector<Tensor> outs = recompute(args);
  std::vector<Tensor> roots, seeds;
  for (size_t k = 0; k < outs.size(); ++k)
    if (grads[k].defined() && outs[k].requires_grad()) {
      roots.push_back(outs[k]);
      seeds.push_back(grads[k]);
    }
  const std::vector<Tensor> got = roots.empty() ? std::vector<Tensor>(targets.size()) : grad(roots, seeds, targets);
  for (size_t i = 0, t = 0; i < out.size(); ++i) {
    if (!mask[i]) continue;
    // No path from the outputs to this target: its gradient is zero.
    out[i] = got[t].defined() ? got[t] : zeros_like(targets[t]);
    ++t;
  }
  return out;
}

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  TG_CHECK(fn != nullptr, kOp, "got an empty function");
  for (size_t i : options.offload)
    TG_CHECK(i < inputs.size(), kOp, "offload names input ", i, ", the function has ", inputs.size());
  if (!grad_mode_enabled()) return fn(inputs);
  for (size_t i = 0; i < inputs.size(); ++i)
    TG_CHECK(inputs[i].defined(), kOp, "input ", i, " is undefined: pass defined tensors (the function "
             "can capture an optional one)");

  std::vector<Tensor> used, outs;
  std::vector<Draws> draws;
  {
    DrawLog log;
    ObservedNoGradGuard no_grad(used);
    outs = fn(inputs);
    draws = log.finish();
  }
  std::vector<Tensor> params;
  for (const Tensor& t : used) {
    if (std::any_of(inputs.begin(), inputs.end(), [&](const Tensor& in) { return in.same(t); })) continue;
    TG_CHECK(t.is_leaf(), kOp, "the function uses a tensor of shape ", t.shape(), " that requires grad and "
             "has a history outside it (neither one of its inputs nor a leaf): pass it as an input");
    params.push_back(t);
  }
  std::vector<Tensor> all = inputs;
  all.insert(all.end(), params.begin(), params.end());
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) names.push_back("input" + std::to_string(i));
  for (size_t j = 0; j < params.size(); ++j) names.push_back("param" + std::to_string(j));
  std::vector<NamedInput> recorded;
  for (size_t i = 0; i < all.size(); ++i) recorded.push_back({names[i].c_str(), all[i]});
  // Fresh handles: an output that is an input or a parameter must not take the node as grad_fn.
  for (size_t k = 0; k < outs.size(); ++k) {
    TG_CHECK(outs[k].defined(), kOp, "the function returned an undefined tensor as output ", k);
    outs[k] = outs[k].detach();
  }
  auto node = record<CheckpointBackward>(recorded, outs);
  if (!node) return outs;  // nothing it computes takes a gradient
  node->offloaded.resize(inputs.size());
  for (size_t i : options.offload) node->offloaded[i] = offload(inputs[i]);
  for (size_t i = 0; i < all.size(); ++i)
    node->saved.emplace_back(i < inputs.size() && node->offloaded[i] ? Tensor() : all[i], names[i]);
  node->fn = fn;
  node->num_args = inputs.size();
  node->params = std::move(params);
  node->draws = std::move(draws);
  for (const Tensor& o : outs) {
    node->out_shapes.push_back(o.shape());
    node->out_dtypes.push_back(o.dtype());
  }
  return outs;
}

}  // namespace tg
