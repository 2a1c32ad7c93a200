// The parts of a linear_group (or the one part of a lora_linear) planned before any GEMM: their
// arguments checked, and where each part's outputs and LoRA products sit in the shared buffers.
// Internal to ops/linear.cpp and ops/lora_linear.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/lora_linear.h"

namespace tg::linear_parts {

// x [..., in], weight [out, in], bias [out] or undefined; errors name `op`.
void check_linear_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias);
// The same for a frozen weight: x in its dtype and on its device.
void check_frozen_args(const char* op, const Tensor& x, const FrozenWeight& weight, const Tensor& bias);
// lora_A [r, in] and lora_B [out, r] of one dtype: x's, or float32 masters of a bfloat16 x.
void check_adapter_args(const char* op, const Tensor& x, int64_t out, int64_t in, const Tensor& lora_A,
                        const Tensor& lora_B);

// A part's columns of the output y = [y_0 | y_1 | ...] and, with an adapter, of the LoRA hidden
// state x A_stacked^T = [x A_0^T | x A_1^T | ...]. rank 0: a plain linear part.
struct Part {
  int64_t out = 0, column = 0;
  int64_t rank = 0, lora_column = 0;
  double scaling = 1.0;
};

struct Plan {
  std::vector<Part> parts;
  int64_t out = 0;   // y's columns: the sum of the parts' out
  int64_t rank = 0;  // the LoRA hidden state's columns: the sum of the parts' ranks
  DType adapter_dtype = kFloat32;
  bool any_bias = false;
  bool frozen = false;  // every part's base is a FrozenWeight (else none is)
};

// Checks every part (one input width, one adapter dtype, frozen bases all or none) and places it.
Plan plan(const char* op, const Tensor& x, const std::vector<LinearSpec>& specs);

// The parts' weights as one [out, in] matrix when they are consecutive row blocks of one
// allocation (nn::place_weights_adjacent), else undefined.
Tensor adjacent_weights(const std::vector<LinearSpec>& specs, int64_t out);

// Columns [first, first + count) of a row-major matrix, and rows of a contiguous one, as views.
Tensor column_block(const Tensor& m, int64_t first, int64_t count);
Tensor row_block(const Tensor& m, int64_t first, int64_t count);

}  // namespace tg::linear_parts
