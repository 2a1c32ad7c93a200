// nn::QuantizedLinear: what a frozen Linear whose weight is held quantised (nn::Linear4bit,
// nn::LinearFp8) tells LoRA and merge_and_unload: its dequantised weight, a copy with another bias
// sharing the quantised state, and that state's tensors by buffer name.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/linear.h"

namespace tg::nn {

// A tensor of the quantised state: its buffer name, the member holding it, whether state_dict has it.
struct QuantizedSlot {
  const char* name;
  Tensor* slot;
  bool persistent = true;
};

class QuantizedLinear : public Linear {
 public:
  // A linear_group part over frozen() in the compute dtype (x in another dtype: its own forward).
  std::optional<LinearSpec> spec() const override;
  // The quantised weight as lora_linear's frozen base, computing in compute_dtype.
  virtual std::shared_ptr<const FrozenWeight> frozen() const = 0;
  // The weight dequantised to `dtype` ([out, in], a new tensor; no autograd).
  virtual Tensor dequantized_weight(DType dtype) const = 0;
  // The same layer with `bias`, sharing the quantised state (LoRA's base).
  virtual std::shared_ptr<QuantizedLinear> with_bias(const Tensor& bias) const = 0;
  // The quantised state's tensors (LoRA on a quantised base registers them too).
  virtual std::vector<QuantizedSlot> state_slots() = 0;
  // The format's name in messages: "4-bit", "FP8".
  virtual const char* format() const = 0;

  DType compute_dtype;

 protected:
  QuantizedLinear(const std::string& type_name, int64_t in, int64_t out, const Tensor& weight, const Tensor& bias,
                  DType compute)
      : Linear(type_name, in, out, weight, bias), compute_dtype(compute) {}
};

}  // namespace tg::nn
