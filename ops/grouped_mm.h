// grouped_mm: the experts of a mixture-of-experts layer as one op (torch._grouped_mm, with a
// bias per expert and peft's LoRA on the 3-D weight, target_parameters). The rows of x [M, K]
// come grouped by expert, group_sizes[e] rows of expert e in order (they sum to M; a host vector:
// a GEMM per expert needs its size on the host, so the caller reads the counts once a layer), and
//   y[rows of e] = x_e w_e^T + bias_e + scaling (x_e A_e^T) B_e^T,
// w [E, N, K] with a unit stride along either of its last two dims (transformers' [E, out, in],
// or gpt-oss's [E, in, out] as transpose(w, 1, 2)), bias [E, N], lora_A [E, r, K], lora_B
// [E, N, r], every float tensor of x's dtype and device. One GEMM per non-empty expert through the
// GEMM contract (Eigen on the CPU, cuBLAS on CUDA); an expert with no row costs nothing.
// Backward computes what its mask asks for: dx_e = dy_e w_e + s (dy_e B_e) A_e, dw_e = dy_e^T x_e,
// db_e = the sum of dy_e's rows, dA_e = s (dy_e B_e)^T x_e, dB_e = s dy_e^T (x_e A_e^T); frozen
// experts cost the dx GEMMs only, and an expert with no row gets zero gradients. It keeps x only
// for dw or dA, w only for dx, x A^T only for dB. Traces: "grouped_mm", "grouped_mm.dx",
// "grouped_mm.dweight_gemm", "grouped_mm.dbias_reduce", "grouped_mm.dA", "grouped_mm.dB".
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tg {

Tensor grouped_mm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& group_sizes,
                  const Tensor& bias = Tensor(), const Tensor& lora_A = Tensor(), const Tensor& lora_B = Tensor(),
                  double scaling = 1.0);

}  // namespace tg
