#include "ops/reduce.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/primitives.h"
#include "ops/detail/checks.h"
#include "ops/detail/dispatch.h"
#include "ops/reduce_kernels.h"
#include "ops/shape.h"
#include "ops/unary.h"

namespace tg {
namespace {

// Sorted, unique, non-negative dims; empty input means all.
std::vector<int64_t> normalize_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim) {
  std::vector<int64_t> out;
  if (dims.empty())
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
  for (int64_t d : dims) out.push_back(wrap_dim(op, d, ndim));
  std::sort(out.begin(), out.end());
  TG_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, "a dim repeats in ",
           std::vector<int64_t>(dims));
  return out;
}

Shape keepdim_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape out = shape;
  for (int64_t d : dims) out[d] = 1;
  return out;
}

Shape dropped_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) out.push_back(shape[d]);
  return out;
}

// The reduced result in keepdim form, without autograd.
Tensor sum_raw(const Tensor& x, const std::vector<int64_t>& dims) {
  Tensor out = Tensor::empty(keepdim_shape(x.shape(), dims), x.options());
  TG_DISPATCH(x.device(), sum, out, x, dims);
  return out;
}

struct SumBackward final : Node {
  Shape in_shape, keep_shape;
  double scale = 1.0;  // 1/count for mean
  const char* label = "sum";
  const char* name() const override { return label; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    Tensor gk = reshape(g[0], keep_shape);
    if (scale != 1.0) gk = mul(gk, scale);
    return {contiguous(expand(gk, in_shape))};
  }
};

struct MaxBackward final : Node {
  Shape in_shape, keep_shape;
  int64_t dim = 0;
  const char* name() const override { return "max"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override;
};

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_floating("sum", "x", x);
  auto ds = normalize_dims("sum", dims, x.dim());
  Tensor out = sum_raw(x, ds);
  if (!keepdim) out = out.as_strided(dropped_shape(x.shape(), ds), contiguous_strides(dropped_shape(x.shape(), ds)), 0);
  if (auto n = record<SumBackward>({{"x", x}}, {out})) {
    n->in_shape = x.shape();
    n->keep_shape = keepdim_shape(x.shape(), ds);
  }
  return out;
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_floating("mean", "x", x);
  auto ds = normalize_dims("mean", dims, x.dim());
  int64_t count = 1;
  for (int64_t d : ds) count *= x.shape()[d];
  TG_CHECK(count > 0, "mean", "mean over zero elements (shape ", x.shape(), ")");
  Tensor s;
  {
    NoGradGuard g;
    s = mul(sum(x, ds, keepdim), 1.0 / static_cast<double>(count));
  }
  if (auto n = record<SumBackward>({{"x", x}}, {s})) {
    n->label = "mean";
    n->in_shape = x.shape();
    n->keep_shape = keepdim_shape(x.shape(), ds);
    n->scale = 1.0 / static_cast<double>(count);
  }
  return s;
}

namespace {
std::pair<Tensor, Tensor> max_raw(const Tensor& x, int64_t d) {
  Shape keep = keepdim_shape(x.shape(), {d});
  Tensor values = Tensor::empty(keep, x.options());
  Tensor indices = Tensor::empty(keep, {kInt64, x.device()});
  TG_CHECK(x.shape()[d] > 0, "max", "max over an empty dim (shape ", x.shape(), ")");
  TG_DISPATCH(x.device(), max, values, indices, x, d);
  return {values, indices};
}
}  // namespace

Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  check_floating("max", "x", x);
  int64_t d = wrap_dim("max", dim, x.dim());
  auto [values, indices] = max_raw(x, d);
  Shape shape = keepdim ? values.shape() : dropped_shape(x.shape(), {d});
  Tensor out = values.as_strided(shape, contiguous_strides(shape), 0);
  if (auto n = record<MaxBackward>({{"x", x}}, {out})) {
    n->in_shape = x.shape();
    n->keep_shape = values.shape();
    n->dim = d;
    n->saved = {SavedTensor(indices, "indices")};
  }
  return out;
}

Tensor max(const Tensor& x) { return max(reshape(x, {-1}), 0); }

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  check_floating("argmax", "x", x);
  int64_t d = wrap_dim("argmax", dim, x.dim());
  Tensor indices = max_raw(x, d).second;
  Shape shape = keepdim ? indices.shape() : dropped_shape(x.shape(), {d});
  return indices.as_strided(shape, contiguous_strides(shape), 0);
}

std::vector<Tensor> MaxBackward::backward(const std::vector<Tensor>& g, const GradMask&) {
  Tensor gk = contiguous(reshape(g[0], keep_shape));
  Tensor dx = Tensor::empty(in_shape, gk.options());
  TG_DISPATCH(dx.device(), max_backward, dx, gk, unpack(0), dim);
  return {dx};
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  TG_CHECK(g.dim() >= static_cast<int64_t>(shape.size()), "sum_to", "cannot sum ", g.shape(), " to ", shape);
  size_t lead = static_cast<size_t>(g.dim()) - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < static_cast<size_t>(g.dim()); ++i)
    if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  Tensor s = sum(g, dims, true);
  return reshape(s, shape);
}

}  // namespace tg
