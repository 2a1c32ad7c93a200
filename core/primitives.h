// The few data-moving primitives every layer needs (factories, autograd's gradient buffers,
// printing, device transfers). They are not differentiable and refuse to write into a tensor
// that requires grad while grad mode is on (use them under NoGradGuard, as optimizers do).
// Each write bumps the destination's version counter.
#pragma once

#include "core/tensor.h"

namespace tg {

// dst = src (same shape); converts dtype; any strides; any devices.
void copy_(const Tensor& dst, const Tensor& src);
// Every element of dst = value.
void fill_(const Tensor& dst, double value);
inline void zero_(const Tensor& dst) { fill_(dst, 0.0); }
// dst += src (same shape and dtype, same device). Used to sum gradients.
void accumulate_(const Tensor& dst, const Tensor& src);

// A contiguous copy of t's values (no autograd; ops/shape.h has the differentiable ones).
Tensor clone_data(const Tensor& t);

namespace detail {
// The CPU implementations (core/cpu_primitives.cpp); CUDA's are in core/cuda/.
void cpu_copy(const Tensor& dst, const Tensor& src);
void cpu_fill(const Tensor& dst, double value);
void cpu_accumulate(const Tensor& dst, const Tensor& src);
void check_writable(const char* op, const Tensor& dst);
}  // namespace detail

}  // namespace tg
