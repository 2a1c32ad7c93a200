// The 2-D side of the GEMM contract (ops/gemm_kernels.h) for the ops built on matrix products
// (linear, lora_linear, linear_cross_entropy): rows of an activation and one product on the
// device of c.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tg::matrix {

// [..., in] -> [N, in] with a unit inner stride (a view when the layout allows, else a copy).
Tensor rows(const Tensor& x);

// c = alpha * a @ b + beta * c for 2-D a [M, K], b [K, N], c [M, N], on c's device.
void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha = 1.0, double beta = 0.0);

// Many such products of one dtype on one device (each c written by one product only): one grouped
// cuBLAS launch on the GPU where it takes them all and they are small (tg::grouped_gemm_enabled; at
// most 4 GFLOP a product on average), else one after another.
struct Product {
  Tensor c, a, b;
};
void gemm_many(const std::vector<Product>& products, double alpha = 1.0, double beta = 0.0);

}  // namespace tg::matrix
