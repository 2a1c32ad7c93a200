#include "nn/detail/adjacent_storage.h"

#include "core/autograd.h"
#include "core/primitives.h"

namespace tg::nn::detail {

void set_data(const Tensor& t, const Tensor& value) {
  TensorImpl& d = t.impl();
  const TensorImpl& s = value.impl();
  d.storage = s.storage;
  d.shape = s.shape;
  d.strides = s.strides;
  d.offset = s.offset;
  d.dtype = s.dtype;
}

std::vector<Tensor> adjacent_copies(const std::vector<Tensor>& tensors, bool copy_values) {
  int64_t total = 0;
  for (const Tensor& t : tensors) total += t.numel();
  NoGradGuard no_grad;
  const Tensor buffer = Tensor::empty({total}, tensors.at(0).options());
  std::vector<Tensor> out;
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    out.push_back(buffer.as_strided(t.shape(), t.strides(), at));
    if (copy_values) copy_(out.back(), t);
    at += t.numel();
  }
  return out;
}

}  // namespace tg::nn::detail
