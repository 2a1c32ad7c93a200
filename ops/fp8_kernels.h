// Backend contract for ops/fp8.h.
// quantize_fp8: x contiguous float32 / bfloat16 [rows, cols]; data uint8 [rows, cols]; scale float32
// [ceil(rows / block_rows), ceil(cols / block_cols)] with any strides (a transposed view for the
// activations' layout); first_bad int64 [1] holding rows * cols, lowered to the first NaN / inf's
// index when check_finite (data and scale are then meaningless).
// dequantize_fp8: out contiguous floating [rows, cols]; data uint8 [rows, cols]; scale float32
// contiguous [ceil(rows / block_rows), ceil(cols / block_cols)]. out = e4m3(data) * scale.
// fp8_gemm (CUDA only, sm_90): out bf16 [M, N] = dequant(a) dequant(b)^T, a uint8 [M, K] scaled per
// 1x128 tile (a_scale float32 [K / 128, M] contiguous), b uint8 [N, K] scaled per 128x128 block
// (b_scale float32 [N / 128, K / 128 rounded up to a multiple of 4] contiguous: cuBLASLt reads
// 16-byte rows), all contiguous, K and N multiples of 128, M of 16.
// transpose_2d (CUDA only, uint8 or float32): out [cols, rows] = in [rows, cols]^T, contiguous.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tg {
namespace cpu {
void quantize_fp8(const Tensor& x, const Tensor& data, const Tensor& scale, const Tensor& first_bad,
                  int64_t block_rows, int64_t block_cols, bool check_finite);
void dequantize_fp8(const Tensor& out, const Tensor& data, const Tensor& scale, int64_t block_rows,
                    int64_t block_cols);
}  // namespace cpu
namespace cuda {
void quantize_fp8(const Tensor& x, const Tensor& data, const Tensor& scale, const Tensor& first_bad,
                  int64_t block_rows, int64_t block_cols, bool check_finite);
void dequantize_fp8(const Tensor& out, const Tensor& data, const Tensor& scale, int64_t block_rows,
                    int64_t block_cols);
void fp8_gemm(const Tensor& out, const Tensor& a, const Tensor& a_scale, const Tensor& b, const Tensor& b_scale);
void transpose_2d(const Tensor& out, const Tensor& in);
// Whether `device` runs FP8 GEMMs with block scales (compute capability 9.x).
bool fp8_gemm_supported(int device);
}  // namespace cuda
}  // namespace tg
