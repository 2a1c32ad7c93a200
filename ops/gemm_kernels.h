// Backend contract for matrix products, used by matmul and linear:
//   c[i] = alpha * a[i] @ b[i] + beta * c[i]
// a [B, M, K], b [B, K, N], c [B, M, N], all 3-D (a 2-D product is B = 1). Each matrix has unit
// stride along one of its two last dims, so a transposed view costs no copy; a batch stride of 0
// reuses one matrix for every i. Same dtype for all three, except float32 c with bfloat16 a and b (the
// products accumulated and stored in float32); float32/bfloat16 accumulate in float32.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tg {
namespace cpu {
void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta);
}
namespace matrix {
struct Product;
}
namespace cuda {
void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta);
// The 2-D products (matrix::gemm_many's) as one cublasGemmGroupedBatchedEx call; false, having
// done nothing, when one of them is not a product it takes (float64, a c that is not row-major,
// an operand it cannot read in place, an empty product).
bool gemm_grouped(const std::vector<matrix::Product>& products, double alpha, double beta);
}
}  // namespace tg
