#include "ops/embedding.h"

#include <vector>

#include "core/autograd.h"
#include "core/primitives.h"
#include "core/trace.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/embedding_kernels.h"
#include "ops/shape.h"

namespace tg {
namespace {

constexpr const char* kOp = "embedding";

// The weight is the node's only input, so the node exists only when the table trains: a frozen
// embedding records nothing and its backward costs nothing. Saves the indices alone.
struct EmbeddingBackward final : Node {
  Shape weight_shape;
  DType weight_dtype = kFloat32;
  const char* name() const override { return kOp; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    if (!mask[0]) return {Tensor()};
    KernelTrace::record("embedding.dweight_scatter");
    Tensor indices = unpack(0);
    const int64_t dim = weight_shape[1];
    Tensor grad = contiguous(reshape(g[0], {indices.numel(), dim}));
    // Scatter-add into a float32 (float64) accumulator: summing repeated rows in bfloat16 would
    // round at every add.
    Tensor acc = Tensor::empty(weight_shape, {g[0].dtype() == kFloat64 ? kFloat64 : kFloat32, g[0].device()});
    fill_(acc, 0.0);
    if (grad.numel() > 0) TG_DISPATCH(acc.device(), embedding_backward, acc, grad, indices);
    if (acc.dtype() == weight_dtype) return {acc};
    Tensor dweight = Tensor::empty(weight_shape, {weight_dtype, acc.device()});
    copy_(dweight, acc);
    return {dweight};
  }
};

// "[1, 2]": the position of flat element i in `shape`.
std::string position_of(const Shape& shape, int64_t i) {
  Shape pos(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    pos[d] = i % shape[d];
    i /= shape[d];
  }
  return detail::to_text(pos);
}

void check_indices_on_host(const Tensor& flat, const Shape& shape, int64_t rows) {
  std::vector<int64_t> idx = flat.to_vector<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i)
    TG_CHECK(idx[i] >= 0 && idx[i] < rows, kOp, "index ", idx[i], " at position ",
             position_of(shape, static_cast<int64_t>(i)), " of 'indices' is out of range for a weight of ",
             rows, " rows, wants 0 <= index < ", rows);
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_floating(kOp, "weight", weight);
  check_defined(kOp, "indices", indices);
  TG_CHECK(indices.dtype() == kInt32 || indices.dtype() == kInt64, kOp,
           "'indices' must be int32 or int64, got ", indices.dtype());
  check_same(kOp, {{"weight", weight}, {"indices", indices}}, /*same_dtype=*/false);
  TG_CHECK(weight.dim() == 2, kOp, "'weight' must be 2-D [V, D], got ", weight.shape());
  const int64_t rows = weight.shape()[0], dim = weight.shape()[1];

  Tensor flat;
  {
    NoGradGuard no_grad;
    flat = reshape(contiguous(indices), {indices.numel()});
  }
  if (flat.device().is_cpu()) check_indices_on_host(flat, indices.shape(), rows);

  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  Tensor out = Tensor::empty(out_shape, weight.options());
  if (out.numel() > 0) TG_DISPATCH(weight.device(), embedding, out, weight, flat);
  if (auto n = record<EmbeddingBackward>({{"weight", weight}}, {out})) {
    n->weight_shape = weight.shape();
    n->weight_dtype = weight.dtype();
    n->saved = {SavedTensor(flat, "indices")};
  }
  return out;
}

}  // namespace tg
