#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "core/autograd.h"
#include "core/primitives.h"

namespace tg {

Tensor Tensor::empty(const Shape& shape, TensorOptions opts) {
  for (int64_t s : shape) TG_CHECK(s >= 0, "empty", "negative size in shape ", shape);
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = nbytes_of(shape, tg::element_size(opts.dtype));  // sizes checked before allocating
  impl->strides = contiguous_strides(shape);
  impl->storage = std::make_shared<Storage>(nbytes, opts.device);
  impl->shape = shape;
  impl->dtype = opts.dtype;
  Tensor t(std::move(impl));
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim("size", d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim("stride", d, dim())]; }

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expect) return false;
    expect *= shape()[d];
  }
  return true;
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(storage()->data()) + storage_offset() * static_cast<int64_t>(element_size());
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  TG_CHECK(shape.size() == strides.size(), "as_strided", "shape ", shape, " and strides ", strides,
           " differ in length");
  // The last element's byte offset, computed without overflow; a view with a negative stride or
  // past the storage is refused.
  int64_t last = offset, step = 0;
  bool fits = offset >= 0;
  for (size_t i = 0; i < shape.size() && fits; ++i)
    fits = strides[i] >= 0 && (shape[i] == 0 || (!__builtin_mul_overflow(shape[i] - 1, strides[i], &step) &&
                                                  !__builtin_add_overflow(last, step, &last)));
  int64_t end_bytes = 0;
  fits = fits && !__builtin_add_overflow(last, 1, &last) &&
         !__builtin_mul_overflow(last, static_cast<int64_t>(element_size()), &end_bytes);
  TG_CHECK(fits && (numel_of(shape) == 0 || end_bytes <= static_cast<int64_t>(storage()->nbytes())), "as_strided",
           "view of shape ", shape, " strides ", strides, " offset ", offset, " reaches outside its storage of ",
           storage()->nbytes(), " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

Tensor& Tensor::requires_grad_(bool on) {
  TG_CHECK(is_leaf() || on, "requires_grad_", "can only turn off requires_grad on a leaf tensor; "
           "use detach() for a non-leaf");
  TG_CHECK(!on || is_floating_point(dtype()), "requires_grad_", "only floating-point tensors can "
           "require gradients, got ", dtype());
  impl().requires_grad = on;
  return *this;
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    TG_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(), "set_grad",
             "gradient ", g.shape(), " ", g.dtype(), " on ", g.device(), " does not match tensor ",
             shape(), " ", dtype(), " on ", device());
  impl().grad = g.impl_ptr();
}

void Tensor::retain_grad() const {
  TG_CHECK(requires_grad(), "retain_grad", "the tensor does not require grad");
  if (is_leaf()) return;
  grad_fn()->retained_outputs_[output_nr()] = impl_ptr();
}

Tensor Tensor::detach() const {
  Tensor t = as_strided(shape(), strides(), storage_offset());
  return t;
}

void Tensor::backward(const Tensor& grad, bool retain_graph, const std::vector<Tensor>& inputs) const {
  tg::backward({*this}, grad.defined() ? std::vector<Tensor>{grad} : std::vector<Tensor>{},
               retain_graph, inputs);
}

void read_to_host(const Tensor& t, DType dtype, void* out) {
  // A contiguous host tensor over a temporary storage, then a plain byte copy into `out`.
  Tensor tmp = Tensor::empty(t.shape(), {dtype, Device::cpu()});
  NoGradGuard g;
  copy_(tmp, t);
  if (tmp.nbytes() > 0) std::memcpy(out, tmp.data_ptr(), tmp.nbytes());  // an empty tensor has no data pointer
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const int64_t n = t.numel();
  std::vector<double> v = t.to_vector<double>();
  const Shape& s = t.shape();
  std::ostringstream body;
  body << std::setprecision(t.dtype() == kFloat64 ? 8 : 4);
  // Prints nested brackets; long dims show their first and last 3 entries.
  auto rec = [&](auto&& self, size_t d, int64_t base) -> void {
    if (d == s.size()) {
      body << v[static_cast<size_t>(base)];
      return;
    }
    int64_t inner = numel_of(Shape(s.begin() + static_cast<long>(d) + 1, s.end()));
    body << "[";
    for (int64_t i = 0; i < s[d]; ++i) {
      if (s[d] > 6 && i == 3) {
        body << "..., ";
        i = s[d] - 3;
      }
      self(self, d + 1, base + i * inner);
      if (i + 1 < s[d]) body << (d + 1 == s.size() ? ", " : ",\n" + std::string(d + 8, ' '));
    }
    body << "]";
  };
  if (n > 0) rec(rec, 0, 0);
  else body << "[]";
  os << "tensor(" << body.str();
  if (t.dtype() != kFloat32) os << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device=" << t.device();
  if (t.grad_fn()) os << ", grad_fn=" << t.grad_fn()->name();
  else if (t.requires_grad()) os << ", requires_grad=true";
  return os << ")";
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

}  // namespace tg
