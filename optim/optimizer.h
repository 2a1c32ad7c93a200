// Optimizers, as torch.optim: step() updates in place, under NoGradGuard, the parameters that have
// a gradient. AdamW is one fused step (ops/adamw_step.h), SGD plain ops; parameter groups as
// torch.optim's (docs/api.md).
//
//   tg::optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-3});
//   opt.zero_grad(); loss.backward(); opt.step();
//   opt.save("opt.safetensors");   // per-parameter state by name and the groups, reloadable
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg::optim {

using NamedParams = std::vector<std::pair<std::string, Tensor>>;
using OptimizerState = std::map<std::string, Tensor>;

// A group's settings; an unset one takes the optimizer's option of the same name.
struct GroupOptions {
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

// The parameters of one group as given to a constructor. Unnamed parameters are named by their
// index in the optimizer's parameter list ("0", "1", ...), as a single unnamed list is.
struct ParamGroupSpec {
  ParamGroupSpec(NamedParams params, GroupOptions options = {}) : params(std::move(params)), options(options) {}
  ParamGroupSpec(const std::vector<Tensor>& params, GroupOptions options = {});
  NamedParams params;
  GroupOptions options;
};

// A group of the optimizer: lr and weight_decay may be changed between steps (step() checks
// them); params are its parameters' indices into named_params().
struct ParamGroup {
  double lr;
  double weight_decay;
  const std::vector<size_t> params;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  // Sets every parameter's grad to undefined (set_to_none=True).
  void zero_grad();

  // The first group's lr (the lr, with one group); set_lr sets every group's.
  double lr() const { return groups_.front().lr; }
  void set_lr(double lr);
  // The groups in the order given (one for a single parameter list); their lr and weight_decay
  // can be set, their parameters not.
  std::span<ParamGroup> param_groups() { return groups_; }
  std::span<const ParamGroup> param_groups() const { return groups_; }
  const std::string& type_name() const { return type_; }
  // Every group's parameters, in group order.
  const NamedParams& named_params() const { return params_; }
  // Steps taken by parameter i (0 before its first update). Reads the device's count where the
  // optimizer keeps it there (AdamW), so it waits for the device.
  int64_t step_count(size_t i = 0) const;

  // "<param name>.step" (int64 scalar) and "<param name>.<buffer>" (e.g. exp_avg) for every
  // parameter that has state (the tensors alias the optimizer's buffers), and per group g
  // "param_groups.<g>.lr", "param_groups.<g>.weight_decay" (float64 scalars) and
  // "param_groups.<g>.params" (int64 indices into named_params(), as torch's state_dict).
  OptimizerState state_dict() const;
  // Replaces the state (copies) and the groups' lr and weight_decay. tg::Error listing every
  // unknown, missing or mis-shaped entry, and groups that differ in number or members. A state
  // without param_groups entries (written before groups existed) keeps the groups' settings.
  void load_state_dict(const OptimizerState& state);
  // state_dict() as safetensors, with the optimizer type in the metadata; load() restores it
  // (the type must match).
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  // Unset group options take default_lr and default_weight_decay.
  Optimizer(std::string type, std::vector<ParamGroupSpec> groups, double default_lr, double default_weight_decay,
            std::vector<std::string> buffer_names);

  struct ParamState {
    int64_t step = 0;
    std::vector<Tensor> buffers;  // one per buffer name; empty until the first update
    // Where defined (AdamW): float64 [4] on the parameter's device, element 0 the steps taken
    // (then `step` is not kept), counted by the device so that a CUDA graph's replays count too.
    Tensor counters;
  };
  // Creates the buffers (zeros like the parameter, of state_dtype) the first time.
  ParamState& state_for(size_t i);
  // The dtype of a parameter's buffers.
  virtual DType state_dtype(const Tensor& param) const { return param.dtype(); }
  // tg::Error unless every group's lr and weight_decay are finite and >= 0.
  void check_groups() const;

  std::vector<ParamState> state_;
  std::vector<std::string> buffer_names_;

 private:
  std::string type_;
  NamedParams params_;
  std::vector<ParamGroup> groups_;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2, added to the gradient (coupled, as torch.optim.SGD)
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroupSpec> groups, SGDOptions options = {});
  SGD(NamedParams params, SGDOptions options = {}) : SGD(std::vector<ParamGroupSpec>{ParamGroupSpec(std::move(params))}, options) {}
  SGD(const std::vector<Tensor>& params, SGDOptions options = {})
      : SGD(std::vector<ParamGroupSpec>{ParamGroupSpec(params)}, options) {}
  void step() override;
  // momentum, dampening and nesterov apply to every group; lr and weight_decay are the groups'
  // defaults.
  const SGDOptions options;
};

// torch.optim.AdamW: decoupled weight decay p *= 1 - lr * wd, then Adam with bias correction:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// bfloat16 parameters keep float32 exp_avg and exp_avg_sq. The step counts and each group's lr
// and weight decay live on the parameters' device (as torch's capturable=True), so step() can be
// captured in a tg::cuda::CUDAGraph (core/cuda_graph.h) after one eager step: each replay uploads
// the groups' lr set on the host since (a scheduler's) and counts its step on the device. The
// optimizer must outlive such a graph.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroupSpec> groups, AdamWOptions options = {});
  AdamW(NamedParams params, AdamWOptions options = {})
      : AdamW(std::vector<ParamGroupSpec>{ParamGroupSpec(std::move(params))}, options) {}
  AdamW(const std::vector<Tensor>& params, AdamWOptions options = {})
      : AdamW(std::vector<ParamGroupSpec>{ParamGroupSpec(params)}, options) {}
  void step() override;
  // betas and eps apply to every group; lr and weight_decay are the groups' defaults.
  const AdamWOptions options;

 protected:
  DType state_dtype(const Tensor& param) const override;

 private:
  // A group's {lr, weight_decay} on one device as last uploaded (stream-ordered, before the steps
  // that read it).
  struct DeviceLr {
    size_t group;
    Device device;
    Tensor lr_wd;
    double lr, weight_decay;
  };
  // The group's tensor on `device`, its values brought up to the group's (created if `create`).
  const Tensor& device_lr(size_t group, Device device, bool create);
  void upload_lrs();
  std::vector<DeviceLr> device_lrs_;
};

}  // namespace tg::optim
