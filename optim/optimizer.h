// Optimizers, as torch.optim: they update, in place and under NoGradGuard, the parameters that
// have a gradient (grad defined) when step() runs; the others are left alone. The math is plain
// device-agnostic ops (one fused GPU kernel per step can replace it later).
//
//   tg::optim::AdamW opt(model->named_trainable_parameters(), {.lr = 1e-3});
//   opt.zero_grad(); loss.backward(); opt.step();
//   opt.save("opt.safetensors");   // per-parameter state by name, reloadable with load()
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tg::optim {

using NamedParams = std::vector<std::pair<std::string, Tensor>>;
using OptimizerState = std::map<std::string, Tensor>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  // Sets every parameter's grad to undefined (set_to_none=True).
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);
  const std::string& type_name() const { return type_; }
  const NamedParams& named_params() const { return params_; }
  // Steps taken by parameter i (0 before its first update).
  int64_t step_count(size_t i = 0) const { return state_.at(i).step; }

  // "<param name>.step" (int64 scalar) and "<param name>.<buffer>" (e.g. exp_avg) for every
  // parameter that has state. The tensors alias the optimizer's buffers.
  OptimizerState state_dict() const;
  // Replaces the state (copies). tg::Error listing every unknown, missing or mis-shaped entry.
  void load_state_dict(const OptimizerState& state);
  // state_dict() as safetensors, with the optimizer type and lr in the metadata; load()
  // restores both (the type must match).
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  // params: named (names key the state) or unnamed (named "0", "1", ...).
  Optimizer(std::string type, NamedParams params, double lr, std::vector<std::string> buffer_names);

  struct ParamState {
    int64_t step = 0;
    std::vector<Tensor> buffers;  // one per buffer name; empty until the first update
  };
  // Creates the buffers (zeros like the parameter) the first time.
  ParamState& state_for(size_t i);

  std::vector<ParamState> state_;
  std::vector<std::string> buffer_names_;

 private:
  std::string type_;
  NamedParams params_;
  double lr_;
};

NamedParams name_by_index(const std::vector<Tensor>& params);

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2, added to the gradient (coupled, as torch.optim.SGD)
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(NamedParams params, SGDOptions options = {});
  SGD(const std::vector<Tensor>& params, SGDOptions options = {}) : SGD(name_by_index(params), options) {}
  void step() override;
  SGDOptions options;
};

// torch.optim.AdamW: decoupled weight decay p *= 1 - lr * wd, then Adam with bias correction:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(NamedParams params, AdamWOptions options = {});
  AdamW(const std::vector<Tensor>& params, AdamWOptions options = {}) : AdamW(name_by_index(params), options) {}
  void step() override;
  AdamWOptions options;
};

}  // namespace tg::optim
