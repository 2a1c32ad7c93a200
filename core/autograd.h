// Tape-based reverse-mode autograd.
//
// A differentiable op whose inputs need a gradient records one Node: the edges to the nodes
// that produced its inputs, the tensors its backward needs (SavedTensor, with the version they
// had), and a name per input. backward() replays the recorded nodes in reverse order of
// recording. Before it runs anything it decides, per node, the gradient mask: input i counts
// only if some path from it reaches a leaf that wants a gradient (all leaves with requires_grad,
// or just `inputs` when given). A node's backward computes exactly the masked gradients; the
// engine rejects a gradient the mask did not ask for, so pruning is a contract, not a hope.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tg {

// ---- grad mode ----
bool grad_mode_enabled();
// Disables recording in its scope (like torch::NoGradGuard).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
  std::vector<Tensor>* prev_observed_;
};

// Enables recording in its scope, also inside a backward (torch::AutoGradMode(true)).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// No recording in its scope, as NoGradGuard, but each tensor that requires grad and reaches an
// op (what the op would have recorded) is added once to `used`: activation checkpointing learns
// from it which parameters its function uses. A NoGradGuard inside (an op's internal work)
// hides its scope.
class ObservedNoGradGuard {
 public:
  explicit ObservedNoGradGuard(std::vector<Tensor>& used);
  ~ObservedNoGradGuard();
  ObservedNoGradGuard(const ObservedNoGradGuard&) = delete;
  ObservedNoGradGuard& operator=(const ObservedNoGradGuard&) = delete;

 private:
  NoGradGuard no_grad_;  // also hides an observer from outside
};

// Whether ops on this thread run in an ObservedNoGradGuard's scope: tg::checkpoint's first pass
// of a function that backward runs again with recording on. An op that picks its kernels by
// whether a backward follows picks as it will then, so both passes compute the same bits.
bool in_checkpoint_first_pass();

using GradMask = std::vector<bool>;

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;  // which output of fn the gradient belongs to
  explicit operator bool() const { return fn != nullptr; }
};

// A tensor kept for backward. Holds a history-free alias (no reference cycle through grad_fn)
// and the storage version at save time, so an in-place write in between is caught.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, std::string name);
  Tensor unpack(const char* op) const;
  bool defined() const { return data_.defined(); }
  // Frees the value after backward (unless retain_graph); a later unpack is the "backward a
  // second time" error.
  void release() {
    released_ = data_.defined();
    data_ = Tensor();
  }
  size_t nbytes() const { return data_.defined() ? data_.nbytes() : 0; }
  const std::string& name() const { return name_; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  std::string name_;
  bool released_ = false;
};

struct NamedInput {
  const char* name;
  const Tensor& tensor;
};

class Node {
 public:
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  // grads: one per output, undefined where no gradient reached that output.
  // Returns one entry per input, defined exactly where mask[i] is true.
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grads, const GradMask& mask) = 0;
  // The kernel variant `mask` selects, e.g. "dx,dweight" (what plans and traces print).
  virtual std::string variant(const GradMask& mask) const;

  size_t num_inputs() const { return edges_.size(); }
  size_t num_outputs() const { return num_outputs_; }
  const std::vector<Edge>& next_edges() const { return edges_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  size_t saved_bytes() const;

  std::vector<SavedTensor> saved;  // freed after backward unless retain_graph

 protected:
  Tensor unpack(size_t i) const { return saved.at(i).unpack(name()); }

 private:
  friend class Engine;
  friend class AccumulateGrad;
  template <class N>
  friend std::shared_ptr<N> record(const std::vector<NamedInput>&, const std::vector<Tensor>&);
  // Links the node to its inputs' producers and makes it the grad_fn of its outputs.
  static void connect(const std::shared_ptr<Node>& self, const std::vector<NamedInput>& inputs,
                      const std::vector<Tensor>& outputs);

  std::vector<Edge> edges_;
  std::vector<std::string> input_names_;
  std::vector<Shape> input_shapes_;
  std::vector<DType> input_dtypes_;
  std::vector<Device> input_devices_;
  friend class Tensor;
  std::vector<std::weak_ptr<TensorImpl>> retained_outputs_;  // outputs that retain_grad()
  uint32_t num_outputs_ = 1;
  uint64_t sequence_nr_ = 0;
};

// True when an op over these inputs must be recorded.
bool needs_record(const std::vector<NamedInput>& inputs);

// Records node N for an op with these inputs and outputs (sets the outputs' grad_fn), or
// returns nullptr when grad mode is off or no input requires grad.
template <class N>
std::shared_ptr<N> record(const std::vector<NamedInput>& inputs, const std::vector<Tensor>& outputs) {
  if (!needs_record(inputs)) return nullptr;
  auto node = std::make_shared<N>();
  Node::connect(node, inputs, outputs);
  return node;
}

// The edge a gradient for `t` flows along: its grad_fn, or the accumulator of a leaf.
Edge gradient_edge(const Tensor& t);

// Calls hook(leaf) each time a backward has added this pass's gradient into leaf.grad(): every
// path's contribution is in, so the gradient is final for that backward (torch's
// register_post_accumulate_grad_hook; data-parallel reducers launch their all-reduce from it).
// tg::grad() does not call it (nothing is accumulated). Hooks run in registration order, under
// no-grad, while backward runs; the hook lives until its handle is destroyed or released.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<TensorImpl> leaf, uint64_t id) : leaf_(std::move(leaf)), id_(id) {}
  HookHandle(HookHandle&& other) noexcept : leaf_(std::move(other.leaf_)), id_(other.id_) { other.leaf_.reset(); }
  HookHandle& operator=(HookHandle&& other) noexcept;
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  ~HookHandle() { remove(); }
  void remove();

 private:
  std::weak_ptr<TensorImpl> leaf_;
  uint64_t id_ = 0;
};
[[nodiscard]] HookHandle register_post_accumulate_grad_hook(const Tensor& leaf,
                                                            std::function<void(const Tensor& leaf)> hook);

// Back-propagates from several roots at once (Tensor::backward is the one-root case).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false, const std::vector<Tensor>& inputs = {});

// The gradients of `roots` (seeded with `grads`, as backward) with respect to `inputs`, leaves that
// require grad, returned instead of added into their .grad (torch.autograd.grad): entry i is
// undefined where no gradient reaches inputs[i]. Masks and kernels are those of
// backward(roots, grads, retain_graph, inputs).
std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& inputs, bool retain_graph = false);

// What backward(roots, inputs) would run, without running it: one entry per node, in order.
struct PlanStep {
  std::string node;     // op name
  GradMask mask;        // per input: is its gradient computed
  std::string variant;  // the kernel variant that mask selects
  std::vector<std::string> inputs;  // input names
  size_t saved_bytes;   // held by the node until it runs (then freed without retain_graph)
  bool runs;            // false: no gradient it could produce is wanted, so it is skipped
};
std::vector<PlanStep> backward_plan(const std::vector<Tensor>& roots, const std::vector<Tensor>& inputs = {});
std::string format_plan(const std::vector<PlanStep>& plan);

}  // namespace tg
