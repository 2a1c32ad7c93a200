// Tensor: a strided view (shape, strides, offset, dtype) of a shared Storage, plus the autograd
// fields PyTorch users know: requires_grad, grad, grad_fn. Copying a Tensor copies the handle,
// not the data (like torch::Tensor).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace tg {

class Node;
class Tensor;

struct TensorOptions {
  DType dtype = kFloat32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;

  // Autograd. A leaf has no grad_fn; a tensor produced by a recorded op has one.
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;                  // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;    // leaves: the node that adds into .grad
  // leaves: called after backward added into .grad (core/autograd.h), by registration id
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_grad_hooks;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, TensorOptions opts = {});

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int64_t size(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t numel() const { return numel_of(impl().shape); }
  const Shape& strides() const { return impl().strides; }
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  TensorOptions options() const { return {dtype(), device(), false}; }
  size_t element_size() const { return tg::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  bool shares_storage_with(const Tensor& other) const { return storage() == other.storage(); }

  // Address of the first element (device memory for CUDA tensors).
  void* data_ptr() const;
  template <class T>
  T* data_ptr() const {
    TG_CHECK(dtype_of<T>() == dtype(), "data_ptr", "tensor has dtype ", dtype(), ", asked for ",
             dtype_of<T>());
    return static_cast<T*>(data_ptr());
  }

  // A view of the same storage with other metadata; no autograd (ops/shape.h has the
  // differentiable views).
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;

  // ---- autograd ----
  bool requires_grad() const { return impl().requires_grad; }
  // Sets requires_grad on a leaf; turning it off on a non-leaf is an error.
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  uint32_t output_nr() const { return impl().output_nr; }
  // Keeps .grad on a non-leaf after backward.
  void retain_grad() const;
  // Same storage, no history, requires_grad false.
  Tensor detach() const;
  // Back-propagates from this tensor. `grad` defaults to 1 for a one-element tensor.
  // `inputs` narrows the leaves that receive .grad. Without retain_graph the saved tensors
  // of every node that ran are freed.
  void backward(const Tensor& grad = {}, bool retain_graph = false,
                const std::vector<Tensor>& inputs = {}) const;

  // ---- in-place bookkeeping ----
  uint64_t version() const { return storage()->version(); }
  void bump_version() const { storage()->bump_version(); }

  // ---- host values (these wait for the device) ----
  template <class T = double>
  T item() const;
  template <class T>
  std::vector<T> to_vector() const;
  std::string str() const;

  TensorImpl& impl() const {
    TG_CHECK(impl_ != nullptr, "tensor", "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Writes t's values, converted to `dtype`, to host memory `out` in row-major order.
void read_to_host(const Tensor& t, DType dtype, void* out);

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out(static_cast<size_t>(numel()));
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<char> bytes(out.size());
    read_to_host(*this, kBool, bytes.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = bytes[i] != 0;
  } else {
    read_to_host(*this, dtype_of<T>(), out.data());
  }
  return out;
}

template <class T>
T Tensor::item() const {
  TG_CHECK(numel() == 1, "item", "tensor has ", numel(), " elements (shape ", shape(),
           "), wants exactly one");
  if constexpr (std::is_same_v<T, bf16>) return bf16(to_vector<float>()[0]);
  else return to_vector<T>()[0];
}

}  // namespace tg
