// Shape ops need no backend: they are metadata over the same storage, or core's strided copy.
#include "ops/shape.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "core/autograd.h"
#include "core/primitives.h"
#include "ops/detail/checks.h"
#include "ops/reduce.h"

namespace tg {
namespace {

Shape infer_shape(const char* op, Shape shape, int64_t numel, const Shape& from) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TG_CHECK(infer < 0, op, "only one dim may be -1, got ", shape);
      infer = static_cast<int64_t>(i);
    } else {
      TG_CHECK(shape[i] >= 0, op, "invalid size in shape ", shape);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TG_CHECK(known != 0 && numel % known == 0, op, "cannot reshape ", from, " (", numel,
             " elements) to ", shape);
    shape[static_cast<size_t>(infer)] = numel / known;
  }
  TG_CHECK(numel_of(shape) == numel, op, "cannot reshape ", from, " (", numel, " elements) to ",
           shape, " (", numel_of(shape), " elements)");
  return shape;
}

// Strides that let `shape` view the same elements as (old_shape, old_strides), if any exist
// (the chunk-matching rule PyTorch uses).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape) {
  Shape strides(shape.size());
  if (numel_of(old_shape) == 0) return contiguous_strides(shape);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

struct ReshapeBackward final : Node {
  Shape in_shape;
  const char* name() const override { return "reshape"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    return {reshape(g[0], in_shape)};
  }
};

struct PermuteBackward final : Node {
  std::vector<int64_t> inverse;
  const char* name() const override { return "permute"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    return {permute(g[0], inverse)};
  }
};

struct SliceBackward final : Node {
  Shape in_shape;
  int64_t dim = 0, start = 0, end = 0, step = 1;
  const char* name() const override { return "slice"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    Tensor dx = Tensor::empty(in_shape, g[0].options());
    zero_(dx);
    copy_(slice(dx, dim, start, end, step), g[0]);
    return {dx};
  }
};

struct ExpandBackward final : Node {
  Shape in_shape;
  const char* name() const override { return "expand"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    return {sum_to(g[0], in_shape)};
  }
};

struct IdentityBackward final : Node {  // contiguous, clone
  const char* label = "clone";
  const char* name() const override { return label; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override { return {g[0]}; }
};

struct CatBackward final : Node {
  int64_t dim = 0;
  std::vector<int64_t> sizes;
  const char* name() const override { return "cat"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask& mask) override {
    std::vector<Tensor> out(sizes.size());
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (mask[i]) out[i] = slice(g[0], dim, at, at + sizes[i]);
      at += sizes[i];
    }
    return out;
  }
};

// One node for all pieces: the input's gradient is assembled in one buffer.
struct SplitBackward final : Node {
  Shape in_shape;
  int64_t dim = 0;
  std::vector<int64_t> sizes;
  const char* name() const override { return "split"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g, const GradMask&) override {
    Tensor dx;
    for (const Tensor& gk : g)
      if (gk.defined() && !dx.defined()) dx = Tensor::empty(in_shape, gk.options());
    int64_t at = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      Tensor piece = slice(dx, dim, at, at + sizes[k]);
      if (g[k].defined()) copy_(piece, g[k]);
      else zero_(piece);
      at += sizes[k];
    }
    return {dx};
  }
};

Tensor record_reshape(const Tensor& x, Tensor out) {
  if (auto n = record<ReshapeBackward>({{"x", x}}, {out})) n->in_shape = x.shape();
  return out;
}

}  // namespace

Tensor view(const Tensor& x, Shape shape) {
  check_defined("view", "x", x);
  shape = infer_shape("view", std::move(shape), x.numel(), x.shape());
  auto strides = view_strides(x.shape(), x.strides(), shape);
  TG_CHECK(strides.has_value(), "view", "cannot view a tensor of shape ", x.shape(), " strides ",
           x.strides(), " as ", shape, ": the elements are not laid out for it (use reshape)");
  return record_reshape(x, x.as_strided(shape, *strides, x.storage_offset()));
}

Tensor reshape(const Tensor& x, Shape shape) {
  check_defined("reshape", "x", x);
  shape = infer_shape("reshape", std::move(shape), x.numel(), x.shape());
  if (auto strides = view_strides(x.shape(), x.strides(), shape))
    return record_reshape(x, x.as_strided(shape, *strides, x.storage_offset()));
  Tensor c = clone_data(x);
  return record_reshape(x, c.as_strided(shape, contiguous_strides(shape), 0));
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  check_defined("flatten", "x", x);
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = wrap_dim("flatten", start_dim, x.dim()), e = wrap_dim("flatten", end_dim, x.dim());
  TG_CHECK(s <= e, "flatten", "start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= x.shape()[d];
  shape.push_back(n);
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, shape);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  check_defined("squeeze", "x", x);
  int64_t d = wrap_dim("squeeze", dim, x.dim());
  if (x.dim() == 0 || x.shape()[d] != 1) return x;
  Shape shape = x.shape();
  shape.erase(shape.begin() + d);
  return reshape(x, shape);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  check_defined("unsqueeze", "x", x);
  int64_t d = wrap_dim("unsqueeze", dim, x.dim() + 1);
  Shape shape = x.shape();
  shape.insert(shape.begin() + d, 1);
  return reshape(x, shape);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined("permute", "x", x);
  TG_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute", "got ", dims.size(),
           " dims for a tensor of ", x.dim(), " dims");
  Shape shape(dims.size()), strides(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim("permute", dims[i], x.dim());
    TG_CHECK(inverse[d] < 0, "permute", "dim ", d, " repeats in ", std::vector<int64_t>(dims));
    inverse[d] = static_cast<int64_t>(i);
    shape[i] = x.shape()[d];
    strides[i] = x.strides()[d];
  }
  Tensor out = x.as_strided(shape, strides, x.storage_offset());
  if (auto n = record<PermuteBackward>({{"x", x}}, {out})) n->inverse = inverse;
  return out;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_defined("transpose", "x", x);
  std::vector<int64_t> dims(static_cast<size_t>(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim("transpose", dim0, x.dim())], dims[wrap_dim("transpose", dim1, x.dim())]);
  return permute(x, dims);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined("slice", "x", x);
  TG_CHECK(x.dim() > 0, "slice", "cannot slice a 0-dim tensor");
  TG_CHECK(step > 0, "slice", "step must be positive, got ", step);
  int64_t d = wrap_dim("slice", dim, x.dim()), n = x.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = x.shape(), strides = x.strides();
  shape[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  Tensor out = x.as_strided(shape, strides, x.storage_offset() + start * x.strides()[d]);
  if (auto node = record<SliceBackward>({{"x", x}}, {out})) {
    node->in_shape = x.shape();
    node->dim = d, node->start = start, node->end = end, node->step = step;
  }
  return out;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  check_defined("expand", "x", x);
  TG_CHECK(shape.size() >= x.shape().size(), "expand", "cannot expand ", x.shape(), " to fewer dims ", shape);
  size_t lead = shape.size() - x.shape().size();
  Shape out_shape(shape.size()), strides(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      TG_CHECK(shape[i] >= 0, "expand", "-1 is not allowed for a new leading dim in ", shape);
      out_shape[i] = shape[i];
      continue;
    }
    int64_t have = x.shape()[i - lead], want = shape[i] == -1 ? have : shape[i];
    TG_CHECK(have == want || have == 1, "expand", "cannot expand ", x.shape(), " to ", shape,
             " (dim ", i, ": ", have, " to ", want, ")");
    out_shape[i] = want;
    strides[i] = have == want ? x.strides()[i - lead] : 0;
  }
  if (out_shape == x.shape()) return x;
  Tensor out = x.as_strided(out_shape, strides, x.storage_offset());
  if (auto n = record<ExpandBackward>({{"x", x}}, {out})) n->in_shape = x.shape();
  return out;
}

Tensor contiguous(const Tensor& x) {
  check_defined("contiguous", "x", x);
  if (x.is_contiguous()) return x;
  Tensor out = clone_data(x);
  if (auto n = record<IdentityBackward>({{"x", x}}, {out})) n->label = "contiguous";
  return out;
}

Tensor clone(const Tensor& x) {
  check_defined("clone", "x", x);
  Tensor out = clone_data(x);
  record<IdentityBackward>({{"x", x}}, {out});
  return out;
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  TG_CHECK(!xs.empty(), "cat", "wants at least one tensor");
  const Tensor& first = xs[0];
  check_defined("cat", "tensors[0]", first);
  int64_t d = wrap_dim("cat", dim, first.dim());
  Shape shape = first.shape();
  shape[d] = 0;
  std::vector<int64_t> sizes;
  bool any_grad = false;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    check_defined("cat", "tensor", t);
    check_same("cat", {{"tensors[0]", first}, {"another tensor", t}});
    bool ok = t.dim() == first.dim();
    for (int64_t k = 0; ok && k < t.dim(); ++k) ok = k == d || t.shape()[k] == first.shape()[k];
    TG_CHECK(ok, "cat", "tensor ", i, " has shape ", t.shape(), ", which differs from tensor 0's ",
             first.shape(), " outside dim ", d);
    sizes.push_back(t.shape()[d]);
    shape[d] += t.shape()[d];
    any_grad = any_grad || t.requires_grad();
  }
  Tensor out = Tensor::empty(shape, first.options());
  int64_t at = 0;
  {
    NoGradGuard g;
    for (size_t i = 0; i < xs.size(); ++i) {
      copy_(slice(out, d, at, at + sizes[i]), xs[i]);
      at += sizes[i];
    }
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < xs.size(); ++i) names.push_back("tensors[" + std::to_string(i) + "]");
  std::vector<NamedInput> inputs;
  for (size_t i = 0; i < xs.size(); ++i) inputs.push_back({names[i].c_str(), xs[i]});
  if (auto node = record<CatBackward>(inputs, {out})) {
    node->dim = d;
    node->sizes = sizes;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined("split", "x", x);
  int64_t d = wrap_dim("split", dim, x.dim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    TG_CHECK(s >= 0, "split", "negative size in ", std::vector<int64_t>(sizes));
    total += s;
  }
  TG_CHECK(total == x.shape()[d], "split", "sizes ", std::vector<int64_t>(sizes), " add up to ",
           total, ", dim ", d, " of ", x.shape(), " has ", x.shape()[d]);
  std::vector<Tensor> pieces;
  {
    NoGradGuard g;  // the pieces are views; one node below covers them all
    int64_t at = 0;
    for (int64_t s : sizes) {
      pieces.push_back(slice(x, d, at, at + s));
      at += s;
    }
  }
  if (auto node = record<SplitBackward>({{"x", x}}, pieces)) {
    node->in_shape = x.shape();
    node->dim = d;
    node->sizes = sizes;
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  check_defined("split", "x", x);
  TG_CHECK(size > 0, "split", "piece size must be positive, got ", size);
  int64_t n = x.shape()[wrap_dim("split", dim, x.dim())];
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += size) sizes.push_back(std::min(size, n - at));
  return split(x, sizes, dim);
}

}  // namespace tg
