// nn::Module: the base of every layer, as torch.nn.Module. A module registers its parameters,
// buffers and submodules by name (register_parameter / register_module, in its constructor);
// dotted names, state dicts, moving and freezing walk that registry. Registration stores a
// reference to the member, so assigning a new tensor or submodule to it (weight tying, LoRA's
// replace_module) is what the registry sees: modules are neither copyable nor movable (hold them
// by shared_ptr). Parameters are leaf tensors that to(...) and load_state_dict change in place.
// docs/your-project.md has a module of one's own, with its test.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
// A module's tensors by dotted name (ordered by name), as torch's state_dict.
using StateDict = std::map<std::string, Tensor>;

// What load_state_dict(strict = false) could not match.
struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// transformers' gradient_checkpointing_kwargs, with what tapegrad's checkpointing can do.
struct GradientCheckpointingKwargs {
  bool offload_activations = false;  // checkpointed layer inputs in host memory until backward
};

class Module {
 public:
  explicit Module(std::string type_name);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The forward of one-input modules (Linear, norms, MLPs, whole models taking token ids).
  // Modules with other signatures define their own forward(...) and leave this one throwing.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  const std::string& type_name() const { return type_name_; }

  // ---- traversal (registration order; shared tensors listed once, as in PyTorch) ----
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  // Parameters with requires_grad: what an optimizer should get.
  NamedTensors named_trainable_parameters() const;
  std::vector<Tensor> trainable_parameters() const;
  NamedTensors named_buffers(bool recurse = true) const;
  // This module (name "") and every descendant, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // The descendant at a dotted path ("model.layers.0.self_attn"); tg::Error when absent.
  std::shared_ptr<Module> get_submodule(const std::string& path) const;
  // Puts `module` where the descendant at `path` was (the parent's member is reassigned).
  // tg::Error when the path is absent or the parent's member cannot hold that module type.
  void replace_module(const std::string& path, std::shared_ptr<Module> module);
  // The parameter or buffer at a dotted path.
  Tensor get_parameter(const std::string& path) const;

  // ---- mode ----
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // ---- activation checkpointing (transformers' gradient_checkpointing_enable) ----
  // Sets the flag on this module and every descendant. A model whose layer loop honours it
  // (DecoderModel, GPT2Model) then runs each layer under tg::checkpoint while training: the layer's
  // activations are recomputed at backward instead of kept (less memory, one more forward of
  // each layer), the gradients bitwise as without. tg::Error when nothing in the subtree honours it.
  // kwargs.offload_activations also keeps each layer's checkpointed input in host memory until
  // backward (core/activation_offload.h): GPU memory for the inputs of only about two layers.
  Module& gradient_checkpointing_enable(const GradientCheckpointingKwargs& kwargs = {});
  Module& gradient_checkpointing_disable();
  bool is_gradient_checkpointing() const { return gradient_checkpointing_; }
  const GradientCheckpointingKwargs& gradient_checkpointing_kwargs() const { return checkpointing_kwargs_; }
  // True for the modules whose forward honours the flag.
  virtual bool supports_gradient_checkpointing() const { return false; }

  // ---- placement: parameters, buffers (and existing grads) change in place ----
  // Tensors that tile one allocation (nn::place_weights_adjacent) and convert alike tile a new one.
  Module& to(Device device);
  // Floating-point parameters and buffers only; integer buffers and buffers registered with
  // keeps_dtype keep their dtype.
  Module& to(DType dtype);
  Module& to(DType dtype, Device device);
  // Only the floating-point parameters and buffers `which` accepts (by dotted name): e.g. the
  // frozen base in bfloat16 under float32 adapters that are already trained (peft's mixed precision).
  Module& to(DType dtype, const std::function<bool(const std::string& name, const Tensor& t)>& which);

  // ---- state ----
  // Parameters and persistent buffers by dotted name. The tensors alias the module's data.
  StateDict state_dict() const;
  // Copies values in (converting dtype and device). strict: any missing key, unexpected key or
  // mis-shaped tensor fails, all of them listed in one tg::Error. Not strict: missing and
  // unexpected keys are returned; a shape mismatch still fails.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);

  // ---- gradients ----
  // Sets every parameter's grad to undefined (PyTorch's set_to_none=True).
  void zero_grad();
  // Sets requires_grad on every parameter of this subtree (freezes with false).
  Module& requires_grad_(bool on = true);
  int64_t num_parameters(bool only_trainable = false) const;

  // A PyTorch-style tree: "Linear(in_features=4, out_features=3, bias=true)".
  std::string str() const;

 protected:
  // `slot` must be a member of this module; it may be undefined (an absent bias).
  void register_parameter(const std::string& name, Tensor& slot, bool requires_grad = true);
  // Buffers are moved and cast with the module but never trained; non-persistent ones stay out
  // of state_dict (e.g. rotary cos/sin tables, which are recomputed). A buffer that keeps_dtype
  // moves with the module but to(dtype) leaves its dtype (a quantised weight's float32 scales).
  void register_buffer(const std::string& name, Tensor& slot, bool persistent = true, bool keeps_dtype = false);
  // `slot` is the member holding the submodule; replace_module assigns through it.
  template <class T>
  void register_module(const std::string& name, std::shared_ptr<T>& slot) {
    register_child(
        name, [&slot] { return std::static_pointer_cast<Module>(slot); },
        [&slot, name](const std::shared_ptr<Module>& m) {
          auto typed = std::dynamic_pointer_cast<T>(m);
          if (!typed) reject_child(name, m);
          slot = std::move(typed);
        });
  }
  // For containers: how to read and write the child named `name`.
  void register_child(const std::string& name, std::function<std::shared_ptr<Module>()> get,
                      std::function<void(const std::shared_ptr<Module>&)> set);
  // Extra text in str(), e.g. "in_features=4, out_features=3".
  virtual std::string extra_repr() const { return ""; }

 private:
  struct ParamEntry {
    std::string name;
    Tensor* slot;
  };
  struct BufferEntry {
    std::string name;
    Tensor* slot;
    bool persistent;
    bool keeps_dtype;
  };
  struct ChildEntry {
    std::string name;
    std::function<std::shared_ptr<Module>()> get;
    std::function<void(const std::shared_ptr<Module>&)> set;
  };
  [[noreturn]] static void reject_child(const std::string& name, const std::shared_ptr<Module>& m);
  void check_new_name(const std::string& name) const;
  // Visits (prefix, module) for this subtree, depth first.
  void walk(const std::string& prefix, const std::function<void(const std::string&, const Module&)>& f) const;
  // f(name, tensor) -> its new value (the tensor itself: unchanged); a gradient follows its tensor.
  Module& convert(const std::function<Tensor(const std::string& name, const Tensor&)>& f);

  std::string type_name_;
  bool training_ = true;
  bool gradient_checkpointing_ = false;
  GradientCheckpointingKwargs checkpointing_kwargs_;
  std::vector<ParamEntry> params_;
  std::vector<BufferEntry> buffers_;
  std::vector<ChildEntry> children_;
};

// An indexed list of submodules named "0", "1", ... (torch.nn.ModuleList).
template <class T>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  void push_back(std::shared_ptr<T> m) {
    const size_t i = items_.size();
    items_.push_back(std::move(m));
    register_child(
        std::to_string(i), [this, i] { return std::static_pointer_cast<Module>(items_[i]); },
        [this, i](const std::shared_ptr<Module>& m) {
          auto typed = std::dynamic_pointer_cast<T>(m);
          TG_CHECK(typed != nullptr, "ModuleList", "element ", i, " cannot hold a ", m ? m->type_name() : "null");
          items_[i] = std::move(typed);
        });
  }
  size_t size() const { return items_.size(); }
  T& operator[](size_t i) const { return *items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<T>> items_;
};

}  // namespace tg::nn
