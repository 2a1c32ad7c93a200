// LoRA as one op (peft's LoRA layer without dropout), W [out, in] as in torch.nn.Linear:
//   lora_linear(x, W, b, A, B, scaling) = x W^T + b + scaling (x A^T) B^T,  A [r, in], B [out, r]
//   linear_group(x, parts)              = a linear or lora_linear per part, on one x, as one op
// Backward computes only the gradients its mask asks for: a frozen W costs no dW GEMM. A and B may
// be float32 masters of a bfloat16 layer (peft's autocast_adapter_dtype). Traces: "<op>.dx",
// "<op>.dweight_gemm", "<op>.dbias_reduce", "<op>.dA", "<op>.dB"; the math: ops/lora_linear.cpp.
// A part's base weight may be held in another format (FP8, NF4: a FrozenWeight): LoRA over a
// quantised base is then the same one op, its products in x's dtype like a dense layer's.
#pragma once

#include <any>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace tg {

Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_A,
                   const Tensor& lora_B, double scaling);

// A frozen weight W [out, in] held in another format than the activations (ops/fp8.h's FP8,
// ops/nf4.h's NF4): the two products the op needs of it, in `dtype`, each c = product + beta c
// (beta 0 or 1). x and dy have a unit inner stride; y and dx may be column blocks of wider rows.
class FrozenWeight {
 public:
  virtual ~FrozenWeight() = default;
  virtual int64_t out_features() const = 0;
  virtual int64_t in_features() const = 0;
  virtual Device device() const = 0;
  virtual DType dtype() const = 0;         // the activations' it computes in
  virtual const char* format() const = 0;  // "FP8", "4-bit": for messages
  // y (+)= x W^T; x_derived: what the format derives from x (FP8: its quantised tiles), kept there
  // for the next part of the group on the same x.
  virtual void forward(const Tensor& y, const Tensor& x, double beta, std::any& x_derived) const = 0;
  virtual void dx(const Tensor& dx, const Tensor& dy, double beta) const = 0;     // dx (+)= dy W
};

// One layer of a group.
struct LinearSpec {
  Tensor weight, bias;
  Tensor lora_A = {}, lora_B = {};  // undefined: a plain linear
  double scaling = 1.0;
  std::shared_ptr<const FrozenWeight> frozen = {};  // the base weight when `weight` is undefined
};

// One output per part, in order. tg::Error when parts is empty or a part's arguments are not
// lora_linear's (or linear's), or when the parts' LoRA adapters differ in dtype, or when some
// parts' base weights are frozen ones and others not.
std::vector<Tensor> linear_group(const Tensor& x, const std::vector<LinearSpec>& parts);
// The same under another op's name (its node, traces and errors): linear_fp8, linear_4bit, a layer's.
std::vector<Tensor> linear_group(const Tensor& x, const std::vector<LinearSpec>& parts, const char* op);

}  // namespace tg
