#include "ops/detail/matrix_gemm.h"

#include "core/cuda_settings.h"
#include "ops/detail/dispatch.h"
#include "ops/gemm_kernels.h"
#include "ops/shape.h"

namespace tg::matrix {
namespace {

// [rows, cols] matrix as the 3-D [1, rows, cols] the GEMM contract wants (a view).
Tensor as_batch(const Tensor& m) {
  return m.as_strided({1, m.shape()[0], m.shape()[1]}, {0, m.strides()[0], m.strides()[1]}, m.storage_offset());
}

}  // namespace

Tensor rows(const Tensor& x) {
  Tensor x2 = reshape(x, {-1, x.shape().back()});
  return x2.strides()[1] == 1 || x2.shape()[1] == 1 ? x2 : contiguous(x2);
}

void gemm(const Tensor& c, const Tensor& a, const Tensor& b, double alpha, double beta) {
  TG_DISPATCH(c.device(), gemm, as_batch(c), as_batch(a), as_batch(b), alpha, beta);
}

void gemm_many(const std::vector<Product>& products, double alpha, double beta) {
  if (products.empty()) return;
#ifdef TG_WITH_CUDA
  // Above this many FLOPs a product on average, cuBLAS's own GEMM for each beats its grouped kernel
  // (H100: Mixtral's experts, 240 GFLOP each, 1.9x slower grouped; Qwen3-30B's at 4096 tokens, 0.8-1.6
  // GFLOP each, 1.6x faster grouped; bench/moe_bench, dev/NOTES.md).
  constexpr double kGroupedMaxFlops = 4e9;
  double flops = 0.0;
  for (const Product& p : products)
    flops += 2.0 * static_cast<double>(p.c.numel()) * static_cast<double>(p.a.shape()[1]);  // 2 M N K
  if (products[0].c.device().is_cuda() && grouped_gemm_enabled() && products.size() > 1 &&
      flops <= kGroupedMaxFlops * static_cast<double>(products.size()) && cuda::gemm_grouped(products, alpha, beta))
    return;
#endif
  for (const Product& p : products) gemm(p.c, p.a, p.b, alpha, beta);
}

}  // namespace tg::matrix
