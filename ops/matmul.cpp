#include "ops/matmul.h"

#include "core/autograd.h"
#include "core/trace.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/gemm_kernels.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace tg {
namespace {

bool unit_stride_matrix(const Tensor& t) {  // t is [B, R, C]
  return t.strides()[2] == 1 || t.strides()[1] == 1 || t.shape()[1] == 1 || t.shape()[2] == 1;
}

// [..., R, C] broadcast to batch shape `batch`, as a 3-D [prod(batch), R, C] view (copied only
// when the batch dims cannot share one stride or the matrix has no unit stride).
Tensor as_batched(const Tensor& t, const Shape& batch) {
  Shape full = batch;
  full.push_back(t.shape()[t.dim() - 2]);
  full.push_back(t.shape()[t.dim() - 1]);
  Tensor e = expand(t, full);
  int64_t nb = numel_of(batch);
  // The batch dims merge into one stride if each is size 1 or strided uniformly.
  int64_t stride = 0;
  bool ok = true;
  for (int64_t d = static_cast<int64_t>(batch.size()) - 1, expect = -1; d >= 0; --d) {
    if (batch[d] == 1) continue;
    if (expect < 0) stride = e.strides()[d], expect = stride * batch[d];
    else if (e.strides()[d] != expect) ok = false;
    else expect = e.strides()[d] * batch[d];
  }
  Tensor v = e.as_strided({nb, full[full.size() - 2], full.back()},
                          {ok ? stride : 0, e.strides()[e.dim() - 2], e.strides()[e.dim() - 1]},
                          e.storage_offset());
  if (ok && unit_stride_matrix(v)) return v;
  Tensor c = contiguous(e);
  return c.as_strided({nb, full[full.size() - 2], full.back()},
                      {full[full.size() - 2] * full.back(), full.back(), 1}, 0);
}

// The product without autograd: a [..., M, K] @ b [..., K, N].
Tensor matmul_raw(const Tensor& a, const Tensor& b) {
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes("matmul", ba, bb);
  const int64_t M = a.shape()[a.dim() - 2], N = b.shape()[b.dim() - 1];
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, a.options());
  Tensor c = out.as_strided({numel_of(batch), M, N}, {M * N, N, 1}, 0);
  TG_DISPATCH(a.device(), gemm, c, as_batched(a, batch), as_batched(b, batch), 1.0, 0.0);
  return out;
}

struct MatmulBackward final : Node {
  enum { kA, kB };
  const char* name() const override { return "matmul"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    Tensor da, db;
    if (mask[0]) {
      KernelTrace::record("matmul.da_gemm");
      Tensor b = unpack(kB);
      da = sum_to(matmul_raw(g[0], transpose(b, -1, -2)), input_shape(0));
    }
    if (mask[1]) {
      KernelTrace::record("matmul.db_gemm");
      Tensor a = unpack(kA);
      db = sum_to(matmul_raw(transpose(a, -1, -2), g[0]), input_shape(1));
    }
    return {da, db};
  }
  Shape a_shape, b_shape;
  const Shape& input_shape(int i) const { return i == 0 ? a_shape : b_shape; }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_floating("matmul", "a", a);
  check_floating("matmul", "b", b);
  check_same("matmul", {{"a", a}, {"b", b}});
  TG_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul", "wants tensors of at least 1 dim, got ",
           a.shape(), " and ", b.shape());
  // 1-D operands: a vector on the left is a row, on the right a column; that dim is removed.
  if (a.dim() == 1 || b.dim() == 1) {
    Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a, b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
    Tensor out = matmul(a2, b2);
    if (b.dim() == 1) out = squeeze(out, -1);
    if (a.dim() == 1) out = squeeze(out, a2.dim() == out.dim() ? -2 : -1);
    return out;
  }
  int64_t ka = a.shape()[a.dim() - 1], kb = b.shape()[b.dim() - 2];
  TG_CHECK(ka == kb, "matmul", "inner dims differ: a ", a.shape(), " has ", ka, " columns, b ",
           b.shape(), " has ", kb, " rows");
  Tensor out = matmul_raw(a, b);
  if (auto n = record<MatmulBackward>({{"a", a}, {"b", b}}, {out})) {
    n->a_shape = a.shape(), n->b_shape = b.shape();
    n->saved = {SavedTensor(b.requires_grad() ? a : Tensor(), "a"),
                SavedTensor(a.requires_grad() ? b : Tensor(), "b")};
  }
  return out;
}

}  // namespace tg
